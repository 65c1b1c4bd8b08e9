"""The SASL exchanges Kafka speaks, sans-IO: PLAIN (RFC 4616) and SCRAM-SHA-256/512
(RFC 5802 through ``scramp``), each a server and a client that turn one token into the next.

A server is created per authentication with a credential lookup; ``respond(token)`` returns
the next server token and raises :class:`SaslAuthenticationError` when the client fails
(wrong password, unknown user, a message out of order or replayed); once ``complete`` is
true, ``username`` is the authenticated user. Clients mirror it: ``first()`` and then
``respond(server_token)`` until ``complete``.

Concurrency: one object per authentication exchange, used by one thread or task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kafka_security.scram import MECHANISMS, ScramCredential

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslAuthenticationError(Exception):
    """The client failed to authenticate (Kafka's SASL_AUTHENTICATION_FAILED)."""


class IllegalSaslStateError(Exception):
    """A token that does not belong in the exchange's current state (ILLEGAL_SASL_STATE)."""


CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(mechanism, username) -> the user's credential, or None."""


class PlainServer:
    """PLAIN: ``[authzid] NUL authcid NUL passwd`` checked against ``users`` (Kafka's
    ``PlainServerCallbackHandler``: the JAAS ``user_<name>="<password>"`` entries)."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username = ""

    def respond(self, token: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError("PLAIN authentication already completed")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, authcid, password = (p.decode("utf-8", "replace") for p in parts)
        if not authcid:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if authzid and authzid != authcid:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        expected = self._users.get(authcid)
        if expected is None or not _equal(expected, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        self.complete = True
        self.username = authcid
        return b""


def _scramp() -> Any:
    """``scramp``, imported on first SCRAM use: most processes that import this module (a
    Spark Python worker reading over PLAINTEXT, a broker without SCRAM listeners) never need
    it, and importing it costs tens of milliseconds at every worker's start."""
    import scramp

    return scramp


class ScramServer:
    """SCRAM-SHA-256/512, server side: client-first -> server-first, client-final ->
    server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server = _scramp().ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0
        self._user = ""
        self.complete = False
        self.username = ""

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        # RFC 5802 saslname: "=2C" is ",", "=3D" is "="
        username = username.replace("=2C", ",").replace("=3D", "=")
        self._user = username
        cred = self._lookup(self.mechanism, username)
        if cred is None:
            raise SaslAuthenticationError("Authentication failed: Invalid user credentials")
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def respond(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from None
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(text)
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(text)
                self.complete = True
                self.username = self._user
                return self._server.get_server_final().encode()
        except SaslAuthenticationError:
            raise
        except (_scramp().ScramException, ValueError, KeyError, IndexError, TypeError) as exc:
            self.username = ""
            raise SaslAuthenticationError(
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            ) from exc
        raise IllegalSaslStateError(f"{self.mechanism} authentication already completed")


def make_server(
    mechanism: str, lookup: CredentialLookup, plain_users: Mapping[str, str]
) -> PlainServer | ScramServer:
    if mechanism == "PLAIN":
        return PlainServer(plain_users)
    if mechanism in MECHANISMS:
        return ScramServer(mechanism, lookup)
    raise ValueError(f"unsupported SASL mechanism {mechanism}")


class PlainClient:
    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._token = b"\x00" + username.encode() + b"\x00" + password.encode()
        self.complete = False

    def first(self) -> bytes:
        return self._token

    def respond(self, token: bytes) -> bytes | None:
        self.complete = True
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._client = _scramp().ScramClient([mechanism], username, password)
        self._step = 0
        self.complete = False

    def first(self) -> bytes:
        return self._client.get_client_first().encode()

    def respond(self, token: bytes) -> bytes | None:
        try:
            if self._step == 0:
                self._step = 1
                self._client.set_server_first(token.decode())
                return self._client.get_client_final().encode()
            self._client.set_server_final(token.decode())
        except _scramp().ScramException as exc:
            raise SaslAuthenticationError(f"{self.mechanism}: {exc}") from exc
        self.complete = True
        return None


def make_client(mechanism: str, username: str, password: str) -> PlainClient | ScramClient:
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in MECHANISMS:
        return ScramClient(mechanism, username, password)
    raise ValueError(
        f"unsupported SASL mechanism {mechanism!r} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
    )


def _equal(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())
