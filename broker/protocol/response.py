"""What a request handler hands back to the connection that carries the response, and what it
may know about that connection (sans-IO: no socket here).

* :class:`Response`: a response body as *chunks*: ``bytes`` written as they are, or a
  :class:`FileRegion` (an open file, a position and a size) that the network layer sends with
  ``sendfile`` so fetched log bytes never pass through Python. ``size`` is the total after
  the 4-byte size prefix.
* :class:`CloseConnection`: raised by a handler to close that one connection (a malformed
  or unacceptable request); every other client is unaffected.
* :class:`ConnectionInfo`: the peer, listener and id of the connection a request arrived on,
  and what a handler asks of it (close after the response, mute while throttled).

Concurrency: plain values; used on the broker's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Chunk", "CloseConnection", "ConnectionInfo", "FileRegion", "Response"]


class FileRegion(Protocol):
    """A region of an open file (a segment's bytes) to send as it is."""

    @property
    def file(self) -> Any: ...

    @property
    def position(self) -> int: ...

    @property
    def size(self) -> int: ...


Chunk = bytes | FileRegion


@dataclass(slots=True)
class Response:
    """A response as chunks; ``size`` is the total bytes after the 4-byte size prefix."""

    chunks: list[Chunk]
    size: int


class CloseConnection(Exception):
    """Raised by a handler to close the connection (malformed or unacceptable request)."""


@dataclass(slots=True)
class ConnectionInfo:
    """What handlers may know about the connection a request arrived on."""

    peer: str
    listener: str
    connection_id: int
    extra: dict[str, Any] = field(default_factory=dict)
    principal: str = "User:ANONYMOUS"
    """Who the client is (Kafka's KafkaPrincipal): ``User:ANONYMOUS`` on PLAINTEXT and on SSL
    without a client certificate, the certificate's mapped DN with one, the SASL user once
    authenticated."""
    sasl: Any = None
    """The SASL exchange of a SASL listener's connection
    (:class:`broker.security.sasl_session.SaslSession`); None on other listeners."""
    internal: bool = False
    """A request from this broker itself (never authorized: it is the broker)."""
    close_after_ms: int | None = None
    """Set by a handler whose response must be the last: the connection writes it, reads
    nothing more and closes this many milliseconds later (Kafka's
    ``connection.failed.authentication.delay.ms``)."""
    throttle_ms: int = 0
    """Set (through :meth:`throttle`) when a client exceeded its quota: once the response is
    written the connection reads nothing for this many milliseconds (KIP-219 muting), then
    goes back to 0."""

    def throttle(self, ms: int) -> None:
        """Mute the connection for ``ms`` after the response being prepared is written."""
        self.throttle_ms = max(self.throttle_ms, ms)
