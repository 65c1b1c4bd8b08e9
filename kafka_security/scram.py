"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka stores them in ZooKeeper.

``/config/users/<user>`` holds the user's entity config, JSON version 1:
``{"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=4096", "producer_byte_rate":"1024"}}``: one entry per mechanism (Kafka's
``ScramCredentialUtils.credentialToString``), beside the user's quotas. Changes are announced
with a ``/config/changes/config_change_<seq>`` notification naming ``users/<user>``.

AlterUserScramCredentials (KIP-554) sends a salt and the *salted* password; the broker
derives the stored and server keys from it (:func:`credential_from_salted`), so a password
never crosses the wire in clear.

Concurrency: pure values and functions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""SCRAM mechanism name -> hashlib name."""
MECHANISM_CODES: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
"""KIP-554's ``mechanism`` int8 -> name (0 is UNKNOWN)."""
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class CredentialFormatError(ValueError):
    """A stored SCRAM credential that does not parse."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A user's SCRAM credential for one mechanism: what the server verifies against."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        try:
            fields = dict(part.split("=", 1) for part in text.split(","))
            return cls(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise CredentialFormatError(f"malformed SCRAM credential: {exc}") from None


def credential_from_salted(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The credential for a salted password (RFC 5802: ClientKey = HMAC(SaltedPassword,
    "Client Key"), StoredKey = H(ClientKey), ServerKey = HMAC(SaltedPassword, "Server Key"))."""
    digest = MECHANISMS[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802 (PBKDF2 with the mechanism's HMAC)."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password`` (a random 32-byte salt unless given)."""
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


def user_credentials(config: dict[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's entity config (other keys, quotas, are skipped)."""
    return {
        name: ScramCredential.from_text(value)
        for name, value in config.items()
        if name in MECHANISMS
    }
