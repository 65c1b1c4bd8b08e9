"""Request dispatch: parse the header, check the API and version against the registry,
decode the body with kio, run the API's handler, encode the response with its header.

Error policy (as Kafka): a header that cannot be parsed, or a body that does not decode,
closes the connection (the broker keeps serving everyone else). An ApiVersions request of a
version the broker does not know is answered with a v0 response carrying
UNSUPPORTED_VERSION and the supported ranges (KIP-511). Another API at an unsupported version
is answered with UNSUPPORTED_VERSION where the response has a top-level error code, and
otherwise closes the connection, which is what Kafka does when it cannot parse a request.
A body that kio decodes but that holds a null where the schema forbids one is malformed too
(``registry.decode_request``). A response whose error message is too long for a Kafka string
is sent with the message cut short.

Concurrency: one call per request on the event loop thread; handlers must do their
order-sensitive synchronous work before their first ``await``. The network layer starts
each request eagerly, inside the socket's read callback (``broker.network.connection``):
the APIs in :data:`EAGER_APIS` run their handler there, up to its first real suspension;
every other request started that way first yields a bare ``None``, so its handler runs in a
task and may use what needs one (``asyncio.timeout``, the inter-broker client).

Client quotas: when any quota is configured (``services.quotas.enabled``; otherwise that one
test is all a request pays), a client's request gets a
:class:`~broker.quota.request_usage.RequestUsage` in ``ctx.quota`` and its handler is timed;
Produce and Fetch record their bytes and time themselves, every other response records the
handler time (``request_percentage``) here and carries the throttle in ``throttle_time_ms``.
Never throttled, as in Kafka: the brokers' own requests (the cluster actions, follower
fetches, requests forwarded by a broker) and the SASL exchange before authentication.

Metrics (``metrics.http.listener`` set: ``services.metrics.enabled``): every answered
request is counted by name and version, and its time from here to its response (a delayed
produce's or long-poll fetch's wait included) goes into the request latency histogram
(:mod:`broker.request_metrics`); without metrics, one attribute test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.api import (
    acls,
    alter_partition,
    api_versions,
    client_quotas,
    configs,
    describe_cluster,
    elect_leaders,
    fetch,
    find_coordinator,
    groups,
    inter_broker,
    list_offsets,
    local_fetch,
    log_dirs,
    metadata,
    offsets,
    produce,
    producer_id,
    reassignments,
    records_admin,
    sasl,
    scram_credentials,
    topics,
    transactions,
    txn_partitions,
)
from broker.api.context import BrokerServices, RequestContext
from broker.api.forwarding import FORWARDING_CLIENT_SUFFIX
from broker.protocol import list_offsets_codec, produce_codec, registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import (
    InvalidRequestError,
    RequestHeader,
    parse_request_header,
    response_header,
    skip_tagged_fields,
)
from broker.protocol.response import CloseConnection, ConnectionInfo, Response
from broker.quota.manager import ClientQuotas
from broker.quota.request_usage import RequestUsage
from broker.request_metrics import Recorder
from broker.security.acl import Operation

log = logging.getLogger(__name__)

Handler = Callable[[RequestContext, Any], Awaitable[Any]]

HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.MILLRACE_LOCAL_FETCH: local_fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.LEADER_AND_ISR: inter_broker.handle_leader_and_isr,
    ApiKey.STOP_REPLICA: inter_broker.handle_stop_replica,
    ApiKey.UPDATE_METADATA: inter_broker.handle_update_metadata,
    ApiKey.CONTROLLED_SHUTDOWN: inter_broker.handle_controlled_shutdown,
    ApiKey.ALTER_PARTITION: alter_partition.handle_alter_partition,
    ApiKey.ALLOCATE_PRODUCER_IDS: alter_partition.handle_allocate_producer_ids,
    ApiKey.OFFSET_COMMIT: offsets.handle_offset_commit,
    ApiKey.OFFSET_FETCH: offsets.handle_offset_fetch,
    ApiKey.FIND_COORDINATOR: find_coordinator.handle,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.CREATE_TOPICS: topics.handle_create_topics,
    ApiKey.DELETE_TOPICS: topics.handle_delete_topics,
    ApiKey.DELETE_RECORDS: records_admin.handle_delete_records,
    ApiKey.INIT_PRODUCER_ID: producer_id.handle_init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: records_admin.handle_offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: configs.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: configs.handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: topics.handle_create_partitions,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.ELECT_LEADERS: elect_leaders.handle,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: reassignments.handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: reassignments.handle_list_partition_reassignments,
    ApiKey.OFFSET_DELETE: offsets.handle_offset_delete,
    ApiKey.DESCRIBE_CLUSTER: describe_cluster.handle,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    ApiKey.END_TXN: transactions.handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: txn_partitions.handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: offsets.handle_txn_offset_commit,
    ApiKey.DESCRIBE_PRODUCERS: txn_partitions.handle_describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (
        scram_credentials.handle_describe_user_scram_credentials
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_credentials.handle_alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quotas.handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: client_quotas.handle_alter_client_quotas,
}
assert set(HANDLERS) == set(registry.SUPPORTED_APIS), "registry and handlers disagree"

# The hot paths whose handlers need no task before their first suspension (no
# asyncio.timeout, TaskGroup or inter-broker client call on the way): they run eagerly.
# Produce only without a transactional id (KIP-890 verification calls the coordinator).
EAGER_APIS = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.FETCH,
        ApiKey.MILLRACE_LOCAL_FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.PRODUCE,
    }
)

# The brokers' own requests, which Kafka answers without quota throttling
# (``sendResponseExemptThrottle``).
THROTTLE_EXEMPT_APIS = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
        ApiKey.ALLOCATE_PRODUCER_IDS,
        ApiKey.WRITE_TXN_MARKERS,
    }
)

# Requests decoded by hand instead of by kio (see each codec's docstring for why).
FAST_DECODERS: dict[ApiKey, Callable[[int, Any, int], Any]] = {
    ApiKey.LIST_OFFSETS: list_offsets_codec.decode_request,
    ApiKey.PRODUCE: produce_codec.decode_request,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Route:
    """What the dispatcher needs to know about one supported (api key, version)."""

    name: str
    handler: Handler
    decode: Callable[[int, Any, int], Any]
    flexible_request: bool
    flexible_response: bool
    eager: bool
    quota_exempt: bool


def _kio_decoder(api_key: int) -> Callable[[int, Any, int], Any]:
    def decode(version: int, frame: bytes | bytearray, pos: int) -> Any:
        # kio reads only read-only buffers (a large frame arrives as a bytearray)
        return registry.decode_request(
            api_key, version, frame if type(frame) is bytes else bytes(frame), pos
        )

    return decode


_ROUTES: dict[tuple[int, int], _Route] = {}


def _route(api_key: int, version: int) -> _Route | None:
    """The route of a supported (api key, version), or None. Routes are cached, and only
    for supported pairs (a client cannot grow the cache with made-up ones)."""
    route = _ROUTES.get((api_key, version))
    if route is not None:
        return route
    if not registry.is_supported(api_key, version):
        return None
    key = ApiKey(api_key)
    route = _ROUTES[(api_key, version)] = _Route(
        name=registry.SUPPORTED_APIS[key][0],
        handler=HANDLERS[key],
        decode=FAST_DECODERS.get(key) or _kio_decoder(api_key),
        flexible_request=registry.is_flexible(api_key, version),
        flexible_response=registry.response_uses_flexible_header(api_key, version),
        eager=key in EAGER_APIS,
        quota_exempt=key in THROTTLE_EXEMPT_APIS,
    )
    return route


class Dispatcher:
    """The connection handler the network server calls for every request frame."""

    def __init__(self, services: BrokerServices, local_listener: str = "PLAINTEXT") -> None:
        self.services = services
        self._local = ConnectionInfo(
            peer="local", listener=local_listener, connection_id=-1, internal=True
        )

    async def handle_local(self, api_key: int, version: int, request: Any) -> Any:
        """Run a request from this broker's own controller (or coordinators) without a
        socket."""
        header = RequestHeader(api_key, version, 0, "local")
        handler = HANDLERS[ApiKey(api_key)]
        return await handler(RequestContext(header, self._local, self.services), request)

    async def __call__(self, conn: ConnectionInfo, frame: bytes | bytearray) -> Response | None:
        session = conn.sasl
        if session is not None and session.raw:
            return sasl.raw_token(conn, session, bytes(frame))
        try:
            header, pos = parse_request_header(frame)
        except InvalidRequestError as exc:
            raise CloseConnection(f"malformed request header: {exc}") from exc
        api_key, version = header.api_key, header.api_version
        if session is not None and not session.authenticated:
            sasl.check_gate(conn, session, api_key)
        route = _route(api_key, version)
        if route is None:
            return self._unsupported(header.correlation_id, api_key, version)
        request = _decode(route, version, frame, pos)
        ctx = RequestContext(header, conn, self.services)
        metrics = self.services.metrics
        started = self.services.clock.monotonic() if metrics.enabled else 0.0
        quotas = self.services.quotas
        if quotas is not None and quotas.enabled and not route.quota_exempt:
            ctx.quota = _quota_usage(ctx, quotas, request, len(frame))
        if (
            not route.eager or (api_key == ApiKey.PRODUCE and request.transactional_id is not None)
        ) and asyncio.current_task() is None:
            # started eagerly, outside any task, but must run in one: a bare yield, and the
            # network layer continues it in a task (already in a task: nothing to do)
            await asyncio.sleep(0)
        result = await _run(ctx, route, request)
        if metrics.enabled:
            self._record(metrics, route, api_key, version, request, started)
        if ctx.quota is not None and not ctx.quota.recorded:
            throttle_ms = ctx.quota.record_request()
            if throttle_ms and result is not None:
                result = _with_throttle(result, api_key, version, throttle_ms)
        if result is None:
            return None
        return _framed(header.correlation_id, route, result, api_key, version)

    def _record(
        self, metrics: Recorder, route: _Route, api_key: int, version: int, request: Any, t0: float
    ) -> None:
        """Count the request and its time (a fetch also as FetchConsumer or FetchFollower,
        as Kafka's RequestMetrics do)."""
        elapsed_ms = (self.services.clock.monotonic() - t0) * 1000.0
        metrics.request_done(route.name, version, elapsed_ms)
        if api_key in (ApiKey.FETCH, ApiKey.MILLRACE_LOCAL_FETCH):
            follower = fetch.replica_id_of(request, version) >= 0
            metrics.request_done(
                "FetchFollower" if follower else "FetchConsumer", version, elapsed_ms
            )

    def _unsupported(self, correlation_id: int, api_key: int, version: int) -> Response:
        if api_key == ApiKey.API_VERSIONS:
            body = registry.encode(api_versions.build_response(0, ErrorCode.unsupported_version))
            hdr = response_header(correlation_id, False)
            return Response([hdr + body], len(hdr) + len(body))
        if api_key in ApiKey._value2member_map_ and ApiKey(api_key) in registry.SUPPORTED_APIS:
            try:
                cls = registry.response_class(api_key, version)
            except Exception as exc:
                raise CloseConnection(f"unsupported API {api_key} v{version}") from exc
            names = {f.name for f in dataclasses.fields(cls)}
            if "error_code" in names:
                response = _defaults(cls, error_code=ErrorCode.unsupported_version)
                if response is not None:
                    body = registry.encode(response)
                    hdr = response_header(correlation_id, bool(cls.__flexible__))
                    return Response([hdr + body], len(hdr) + len(body))
        raise CloseConnection(f"unsupported API {api_key} v{version}")


def _decode(route: _Route, version: int, frame: bytes | bytearray, pos: int) -> Any:
    """The request body after the header at ``pos`` (a malformed one closes the
    connection)."""
    try:
        if route.flexible_request:
            pos = skip_tagged_fields(frame, pos)
        return route.decode(version, frame, pos)
    except Exception as exc:
        raise CloseConnection(f"malformed {route.name} v{version} request: {exc}") from exc


async def _run(ctx: RequestContext, route: _Route, request: Any) -> Any:
    """The handler's result (timed against the quota when there is one); a handler's failure
    closes the connection."""
    try:
        if ctx.quota is None:
            return await route.handler(ctx, request)
        return await ctx.quota.timed(route.handler(ctx, request))
    except CloseConnection:
        raise
    except Exception as exc:
        log.exception("handler for %s v%d failed", route.name, ctx.header.api_version)
        raise CloseConnection(f"internal error: {exc}") from exc


def _framed(
    correlation_id: int, route: _Route, result: Any, api_key: int, version: int
) -> Response:
    """The response frame: the response header, then the (encoded) result."""
    hdr = response_header(correlation_id, route.flexible_response)
    if isinstance(result, Response):
        chunks = result.chunks
        if len(chunks) == 1 and isinstance(chunks[0], bytes):
            return Response([hdr + chunks[0]], len(hdr) + result.size)
        return Response([hdr, *chunks], len(hdr) + result.size)
    body = _encode(result, api_key, version)
    return Response([hdr + body], len(hdr) + len(body))


def _quota_usage(
    ctx: RequestContext, quotas: ClientQuotas, request: Any, size: int
) -> RequestUsage | None:
    """The request's quota accounting, or None when it is exempt: the SASL exchange before
    authentication, a follower's fetch, a request a broker forwarded (the last two only for
    a principal allowed CLUSTER_ACTION, as Kafka checks)."""
    conn = ctx.connection
    if conn.internal or (conn.sasl is not None and not conn.sasl.authenticated):
        return None
    key = ctx.header.api_key
    if (
        (key == ApiKey.FETCH and int(request.replica_id) >= 0)
        or (ctx.client_id or "").endswith(FORWARDING_CLIENT_SUFFIX)
    ) and ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        return None
    return RequestUsage(quotas, ctx.services.clock, conn, ctx.client_id, size)


def _with_throttle(result: Any, api_key: int, version: int, throttle_ms: int) -> Any:
    """The response with ``throttle_time_ms`` set (a response without the field is sent as
    it is; the connection is muted all the same)."""
    if isinstance(result, Response):
        # hand-encoded: Fetch (v4+) and ListOffsets v2+ open with throttle_time_ms (Produce
        # and Fetch set theirs when they record their bytes; this is for their early answers)
        chunks = result.chunks
        opens_with_throttle = api_key in (ApiKey.FETCH, ApiKey.MILLRACE_LOCAL_FETCH) or (
            api_key == ApiKey.LIST_OFFSETS and version >= 2
        )
        if opens_with_throttle and chunks and isinstance(chunks[0], bytes) and len(chunks[0]) >= 4:
            head = chunks[0]
            chunks = [throttle_ms.to_bytes(4, "big") + head[4:], *chunks[1:]]
            return Response(chunks, result.size)
        return result
    if (
        dataclasses.is_dataclass(result)
        and not isinstance(result, type)
        and hasattr(result, "throttle_time")
    ):
        return dataclasses.replace(
            result, throttle_time=datetime.timedelta(milliseconds=throttle_ms)
        )
    return result


# An error message echoes what the client sent (a topic name of 32767 bytes, say); Kafka's
# strings hold at most 32767 bytes, so a message is cut to this many characters.
MAX_ERROR_MESSAGE_CHARS = 1024


def _encode(result: Any, api_key: int, version: int) -> bytes:
    """Encode a response; one whose error messages are too long for a Kafka string is
    encoded again with them cut short. A response that still cannot be encoded closes the
    connection (logged) instead of killing the connection's writer."""
    try:
        return registry.encode(result)
    except Exception as first:  # noqa: BLE001 - kio raises its own OutOfBoundValue
        try:
            return registry.encode(_shorten_messages(result))
        except Exception as exc:  # noqa: BLE001
            name = registry.SUPPORTED_APIS[ApiKey(api_key)][0]
            log.warning("cannot encode the %s v%d response: %s", name, version, exc)
            raise CloseConnection(f"cannot encode the {name} v{version} response") from first


def _shorten_messages(value: Any) -> Any:
    """A copy of a kio response with every ``error_message`` cut to
    MAX_ERROR_MESSAGE_CHARS (nested messages included)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if f.name == "error_message" and isinstance(item, str):
            if len(item) > MAX_ERROR_MESSAGE_CHARS:
                changes[f.name] = item[: MAX_ERROR_MESSAGE_CHARS - 3] + "..."
        elif isinstance(item, tuple) and item and dataclasses.is_dataclass(item[0]):
            shortened = tuple(_shorten_messages(x) for x in item)
            if any(a is not b for a, b in zip(shortened, item, strict=True)):
                changes[f.name] = shortened
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            one = _shorten_messages(item)
            if one is not item:
                changes[f.name] = one
    return dataclasses.replace(value, **changes) if changes else value


def _defaults(cls: type[Any], **overrides: Any) -> Any:
    """An instance of a kio response with empty collections and zero values."""
    import datetime
    import typing

    kwargs: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            kwargs[f.name] = overrides[f.name]
            continue
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        hint = hints.get(f.name)
        text = str(hint)
        if "tuple" in text:
            kwargs[f.name] = ()
        elif "timedelta" in text or "Timedelta" in text:
            kwargs[f.name] = datetime.timedelta(0)
        elif "None" in text:
            kwargs[f.name] = None
        elif "str" in text:
            kwargs[f.name] = ""
        elif "bool" in text:
            kwargs[f.name] = False
        else:
            try:
                kwargs[f.name] = hint(0) if callable(hint) else 0
            except Exception:  # noqa: BLE001
                return None
    try:
        return cls(**kwargs)
    except Exception:  # noqa: BLE001
        return None
