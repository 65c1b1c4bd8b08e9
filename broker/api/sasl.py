"""SaslHandshake (17) and SaslAuthenticate (36), and the gate every request of a SASL
listener passes (Kafka's ``SaslServerAuthenticator``; the states are in
:mod:`broker.security.sasl_session`).

* Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served;
  any other request closes the connection, as Kafka does ("Unexpected Kafka request of type
  ... during SASL handshake").
* SaslHandshake naming a mechanism the listener does not enable: UNSUPPORTED_SASL_MECHANISM
  with the enabled list, then the connection closes.
* SaslAuthenticate that fails (wrong password, unknown user, a tampered or replayed SCRAM
  message): SASL_AUTHENTICATION_FAILED; out of order during the exchange:
  ILLEGAL_SASL_STATE. Either way the response is the connection's last, and it closes
  ``connection.failed.authentication.delay.ms`` later.
* On a listener without SASL, or once authenticated, SaslHandshake and SaslAuthenticate
  are answered ILLEGAL_SASL_STATE and the connection serves on, as Kafka's KafkaApis does
  (a SaslHandshake on an authenticated connection starts a re-authentication instead).
* After a v0 handshake the tokens come as raw size-prefixed frames, not requests
  (:func:`raw_token`).
* A session past ``connections.max.reauth.ms`` serves nothing but a re-authentication.

No token, password or credential is ever logged.

Concurrency: on the event loop, one request of a connection at a time (the client waits for
each SASL response).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.response import CloseConnection, ConnectionInfo, Response
from broker.security.sasl_session import SaslSession, SaslState
from kafka_security.sasl_mechanisms import IllegalSaslStateError, SaslAuthenticationError

log = logging.getLogger(__name__)

SASL_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def check_gate(conn: ConnectionInfo, session: SaslSession, api_key: int) -> None:
    """Refuse (close) a request the connection's SASL state does not allow."""
    if api_key in SASL_APIS:
        return
    if session.state is SaslState.COMPLETE:
        raise CloseConnection(
            f"SASL session of {conn.principal} expired (connections.max.reauth.ms)"
        )
    name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
    raise CloseConnection(f"Unexpected Kafka request of type {name} during SASL handshake")


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.SASL_HANDSHAKE, ctx.version)
    session: SaslSession | None = ctx.connection.sasl
    if session is None:
        # a listener without SASL: Kafka's KafkaApis answers ILLEGAL_SASL_STATE, and serves on
        return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    mechanism = str(request.mechanism)
    try:
        ok = session.handshake(mechanism, ctx.version)
    except IllegalSaslStateError:
        _fail(ctx, session)
        return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=session.mechanisms)
    if not ok:
        log.info(
            "connection %s asked for SASL mechanism %r, not enabled on listener %s",
            ctx.connection.peer,
            mechanism[:64],
            ctx.connection.listener,
        )
        _fail(ctx, session)
        return cls(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=session.mechanisms)
    return cls(error_code=ErrorCode.none, mechanisms=session.mechanisms)


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.SASL_AUTHENTICATE, ctx.version)
    session: SaslSession | None = ctx.connection.sasl
    if session is None or session.authenticated:
        # no SASL here, or already authenticated (not re-authenticating): as Kafka's
        # KafkaApis, ILLEGAL_SASL_STATE, and the connection serves on
        return _auth_response(
            cls,
            ErrorCode.illegal_sasl_state,
            "SaslAuthenticate request received after successful authentication"
            if session is not None
            else "SASL is not enabled on this listener",
        )
    try:
        reply, lifetime_ms = session.authenticate(bytes(request.auth_bytes))
    except IllegalSaslStateError as exc:
        _fail(ctx, session)
        return _auth_response(cls, ErrorCode.illegal_sasl_state, str(exc))
    except SaslAuthenticationError as exc:
        log.info(
            "authentication failed on %s (listener %s): %s",
            ctx.connection.peer,
            ctx.connection.listener,
            exc,
        )
        _fail(ctx, session)
        return _auth_response(cls, ErrorCode.sasl_authentication_failed, str(exc))
    if session.state is SaslState.COMPLETE and session.principal is not None:
        ctx.connection.principal = session.principal
    return _auth_response(cls, ErrorCode.none, None, reply, lifetime_ms)


def raw_token(conn: ConnectionInfo, session: SaslSession, frame: bytes) -> Response:
    """A token after a v0 SaslHandshake: answered with the server's raw token; a failure
    closes the connection (there is no error field to carry it)."""
    try:
        reply, _ = session.authenticate(frame)
    except (SaslAuthenticationError, IllegalSaslStateError) as exc:
        log.info("authentication failed on %s: %s", conn.peer, exc)
        raise CloseConnection("SASL authentication failed") from None
    if session.state is SaslState.COMPLETE and session.principal is not None:
        conn.principal = session.principal
    return Response([reply], len(reply))


def _fail(ctx: RequestContext, session: SaslSession) -> None:
    ctx.connection.close_after_ms = session.failure_delay_ms


def _auth_response(
    cls: type[Any],
    code: ErrorCode,
    message: str | None,
    auth_bytes: bytes = b"",
    lifetime_ms: int = 0,
) -> Any:
    return registry.build(
        cls,
        error_code=code,
        error_message=message,
        auth_bytes=auth_bytes,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
    )
