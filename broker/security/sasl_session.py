"""The SASL state of one connection to a SASL listener (Kafka's
``SaslServerAuthenticator``), driven by the SaslHandshake and SaslAuthenticate handlers.

States: ``HANDSHAKE`` (only ApiVersions and SaslHandshake may come), ``AUTHENTICATE`` (a
mechanism was chosen: SaslAuthenticate tokens, or raw tokens after a v0 handshake),
``COMPLETE`` (every request allowed; a new SaslHandshake starts a re-authentication,
KIP-368), ``FAILED`` (the connection is closing). With ``connections.max.reauth.ms`` > 0 a
session expires that long after it completed: a request other than a re-authentication
after that closes the connection. A re-authentication must name the same principal.

Concurrency: one per connection, used on the broker's event loop.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping

from kafka_security.sasl_mechanisms import (
    CredentialLookup,
    IllegalSaslStateError,
    PlainServer,
    SaslAuthenticationError,
    ScramServer,
    make_server,
)


class SaslState(enum.Enum):
    HANDSHAKE = 1
    AUTHENTICATE = 2
    COMPLETE = 3
    FAILED = 4


class SaslSession:
    """One connection's SASL exchange (see the module docstring)."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        lookup: CredentialLookup,
        plain_users: Mapping[str, str],
        *,
        reauth_ms: int = 0,
        failure_delay_ms: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mechanisms = mechanisms
        self._lookup = lookup
        self._plain_users = plain_users
        self.reauth_ms = reauth_ms
        self.failure_delay_ms = failure_delay_ms
        self._clock = clock
        self.state = SaslState.HANDSHAKE
        self.raw = False  # a v0 handshake: the tokens come unwrapped
        self._server: PlainServer | ScramServer | None = None
        self.principal: str | None = None
        self._expires_at: float | None = None

    @property
    def authenticated(self) -> bool:
        """Whether requests other than the SASL ones may be served now."""
        if self.state is not SaslState.COMPLETE:
            return False
        return self._expires_at is None or self._clock() < self._expires_at

    @property
    def reauthenticating(self) -> bool:
        return self.principal is not None and self.state is not SaslState.COMPLETE

    def handshake(self, mechanism: str, version: int) -> bool:
        """A SaslHandshake: whether the mechanism is enabled (if so, tokens follow)."""
        if self.state is SaslState.AUTHENTICATE:
            raise IllegalSaslStateError("SaslHandshake during SASL authentication")
        if mechanism not in self.mechanisms:
            self.state = SaslState.FAILED
            return False
        self._server = make_server(mechanism, self._lookup, self._plain_users)
        self.state = SaslState.AUTHENTICATE
        self.raw = version == 0
        return True

    def authenticate(self, token: bytes) -> tuple[bytes, int]:
        """A client token: (the server's token, the session lifetime in ms, 0 when
        unlimited, meaningful once complete). Raises :class:`SaslAuthenticationError` or
        :class:`IllegalSaslStateError` (the state becomes FAILED)."""
        if self.state is not SaslState.AUTHENTICATE or self._server is None:
            self.state = SaslState.FAILED
            raise IllegalSaslStateError(
                "SaslAuthenticate without a SaslHandshake"
                if self.state is not SaslState.COMPLETE
                else "SaslAuthenticate after the authentication completed"
            )
        server = self._server
        try:
            reply = server.respond(token)
        except (SaslAuthenticationError, IllegalSaslStateError):
            self.state = SaslState.FAILED
            raise
        if not server.complete:
            return reply, 0
        principal = f"User:{server.username}"
        if self.principal is not None and principal != self.principal:
            self.state = SaslState.FAILED
            raise SaslAuthenticationError("Cannot change principals during re-authentication")
        self.principal = principal
        self.state = SaslState.COMPLETE
        self.raw = False
        self._server = None
        if self.reauth_ms > 0:
            self._expires_at = self._clock() + self.reauth_ms / 1000.0
            return reply, self.reauth_ms
        return reply, 0
