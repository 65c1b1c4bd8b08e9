"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546, as a ZooKeeper-mode Kafka 3.9
broker answers them (``KafkaApis`` and ``ZkAdminManager``): what ``kafka-configs.sh
--bootstrap-server ... --entity-type users|clients`` sends to show and change quotas.

Quotas live in ``/config/users/<user>``, ``/config/users/<user>/clients/<client-id>`` and
``/config/clients/<client-id>`` (:mod:`broker.quota.entities`), the users' beside their SCRAM
credentials (a write changes only the quota keys it names).

Checks as Kafka's: DESCRIBE_CONFIGS (describe) or ALTER_CONFIGS (alter) on the cluster, else
CLUSTER_AUTHORIZATION_FAILED. Describe: a filter naming an entity type twice, or an empty
type, is INVALID_REQUEST, an unknown type UNSUPPORTED_VERSION; ``strict`` leaves out the
entities that have a part the filter does not name. Alter, per entity: no parts, an unknown
part, an empty name, an unknown key or a fractional value for a long key is INVALID_REQUEST
and nothing of that entity is written; ``validate_only`` writes nothing. IP entities
(connection-rate quotas) are refused: Millrace does not enforce them.

Concurrency: handlers on the event loop; ZooKeeper writes are conditional on the znode's
version (two brokers altering the same entity do not lose each other's changes).
"""

from __future__ import annotations

import datetime
import logging
import math
from dataclasses import dataclass
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.quota.entities import (
    CLIENT_ID,
    CLIENTS,
    DEFAULT,
    IP,
    QUOTA_KEYS,
    USER,
    USERS,
    QuotaEntity,
    desanitize,
    format_value,
    quota_values,
    sanitize,
)
from broker.security.acl import Operation
from broker.zk.security import ZkSecurityOps

log = logging.getLogger(__name__)

_NO_TIME = datetime.timedelta(0)
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2
_CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."


class _InvalidRequest(Exception):
    code = ErrorCode.invalid_request


class _Unsupported(_InvalidRequest):
    code = ErrorCode.unsupported_version


# ------------------------------------------------------------------ DescribeClientQuotas


@dataclass(frozen=True, slots=True)
class _Component:
    """A filter component: ``match`` is a name (exact) or None (the default entity), or
    ``any_name``: any entity of the type (the default included, as Kafka's ZooKeeper-mode
    describe matches it)."""

    match: str | None
    any_name: bool

    def matches(self, name: str | None, present: bool) -> bool:
        if not present:
            return False
        return self.any_name or name == self.match


async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, ctx.version)
    zk = ctx.services.zk_security
    if not ctx.authorize_cluster(Operation.DESCRIBE_CONFIGS) or zk is None:
        return _describe_error(
            cls,
            ErrorCode.cluster_authorization_failed,
            _CLUSTER_AUTHORIZATION_FAILED if zk is not None else "no ZooKeeper",
        )
    try:
        components = _filter(request)
        if IP in components:
            if len(components) > 1:
                raise _InvalidRequest(
                    "Invalid entity filter component combination, IP filter component should "
                    "not be used with user or clientId filter component."
                )
            found: dict[QuotaEntity, dict[str, float]] = {}  # no IP quotas can exist here
        else:
            found = await _describe(zk, components.get(USER), components.get(CLIENT_ID), request)
    except _InvalidRequest as exc:
        return _describe_error(cls, exc.code, str(exc))
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unavailable
        log.warning("describing client quotas failed: %s", exc)
        return _describe_error(cls, ErrorCode.unknown_server_error, type(exc).__name__)
    entry_cls = registry.nested(cls, "EntryData")
    entity_cls = registry.nested(cls, "EntityData")
    value_cls = registry.nested(cls, "ValueData")
    entries = []
    for entity in sorted(found, key=lambda e: (e.user or "", e.client_id or "")):
        entries.append(
            entry_cls(
                entity=tuple(
                    entity_cls(entity_type=kind, entity_name=name)
                    for kind, name in entity.describe().items()
                ),
                values=tuple(
                    value_cls(key=key, value=value) for key, value in sorted(found[entity].items())
                ),
            )
        )
    return cls(
        throttle_time=_NO_TIME,
        error_code=ErrorCode.none,
        error_message=None,
        entries=tuple(entries),
    )


def _describe_error(cls: type[Any], code: ErrorCode, message: str) -> Any:
    return cls(throttle_time=_NO_TIME, error_code=code, error_message=message, entries=None)


def _filter(request: Any) -> dict[str, _Component]:
    """The request's filter components by entity type (Kafka's ``ClientQuotaFilter``)."""
    out: dict[str, _Component] = {}
    for c in request.components:
        kind = str(c.entity_type)
        match_type = int(c.match_type)
        if match_type == MATCH_EXACT:
            if c.match is None:
                raise _InvalidRequest(f"Exact match of {kind} needs a name")
            component = _Component(str(c.match), any_name=False)
        elif match_type == MATCH_DEFAULT:
            component = _Component(None, any_name=False)
        elif match_type == MATCH_SPECIFIED:
            component = _Component(None, any_name=True)
        else:
            raise _InvalidRequest(f"Unexpected match type: {match_type}")
        if kind in (USER, CLIENT_ID, IP):
            if kind in out:
                name = "client" if kind == CLIENT_ID else kind
                raise _InvalidRequest(f"Duplicate {name} filter component entity type")
        elif kind == "":
            raise _InvalidRequest("Unexpected empty filter component entity type")
        else:
            raise _Unsupported(f"Custom entity type '{kind}' not supported")
        out[kind] = component
    return out


async def _describe(
    zk: ZkSecurityOps, user: _Component | None, client: _Component | None, request: Any
) -> dict[QuotaEntity, dict[str, float]]:
    """``ZkAdminManager.handleDescribeClientQuotas``: read only the znodes the filter can
    match, keep the entities with quota entries that it matches."""
    strict = bool(request.strict)
    exact_user = user is not None and not user.any_name
    exact_client = client is not None and not client.any_name
    exclude_user = strict and user is None
    exclude_client = strict and client is None
    candidates: list[QuotaEntity] = []
    if exact_user and exclude_client:
        assert user is not None
        candidates.append(QuotaEntity(_sanitized(user.match), None))
    elif not exclude_user and not exact_client:
        candidates += [QuotaEntity(u, None) for u in await zk.list_entities(USERS)]
    if exclude_user and exact_client:
        assert client is not None
        candidates.append(QuotaEntity(None, _sanitized(client.match)))
    elif not exact_user and not exclude_client:
        candidates += [QuotaEntity(None, c) for c in await zk.list_entities(CLIENTS)]
    if exact_user and exact_client:
        assert user is not None and client is not None
        candidates.append(QuotaEntity(_sanitized(user.match), _sanitized(client.match)))
    elif not exclude_user and not exclude_client:
        for u in await zk.list_entities(USERS):
            candidates += [
                QuotaEntity(u, c) for c in await zk.list_entities(f"{USERS}/{u}/{CLIENTS}")
            ]

    def matches(component: _Component | None, part: str | None) -> bool:
        present = part is not None
        name = None if part is None or part == DEFAULT else desanitize(part)
        if component is None:
            return not present or not strict
        return component.matches(name, present)

    out: dict[QuotaEntity, dict[str, float]] = {}
    for entity in dict.fromkeys(candidates):
        if not (matches(user, entity.user) and matches(client, entity.client_id)):
            continue
        kind, name = entity.config_path()
        values = quota_values(await zk.get_entity_config(kind, name), entity)
        if values:
            out[entity] = values
    return out


def _sanitized(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


# ------------------------------------------------------------------ AlterClientQuotas


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.ALTER_CLIENT_QUOTAS, ctx.version)
    entry_cls = registry.nested(cls, "EntryData")
    entity_cls = registry.nested(cls, "EntityData")
    zk = ctx.services.zk_security
    if not ctx.authorize_cluster(Operation.ALTER_CONFIGS) or zk is None:
        message = _CLUSTER_AUTHORIZATION_FAILED if zk is not None else "no ZooKeeper"
        return cls(
            throttle_time=_NO_TIME,
            entries=tuple(
                entry_cls(
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message=message,
                    entity=tuple(
                        entity_cls(entity_type=e.entity_type, entity_name=e.entity_name)
                        for e in entry.entity
                    ),
                )
                for entry in request.entries
            ),
        )
    # one result per distinct entity (Kafka answers from a map: the last entry wins)
    results: dict[frozenset[tuple[str, str | None]], tuple[ErrorCode, str | None]] = {}
    for entry in request.entries:
        parts = {str(e.entity_type): e.entity_name for e in entry.entity}
        key = frozenset(parts.items())
        results.pop(key, None)
        results[key] = await _alter_entity(ctx, zk, parts, entry.ops, bool(request.validate_only))
    return cls(
        throttle_time=_NO_TIME,
        entries=tuple(
            entry_cls(
                error_code=code,
                error_message=message,
                entity=tuple(
                    entity_cls(entity_type=kind, entity_name=name) for kind, name in sorted(key)
                ),
            )
            for key, (code, message) in results.items()
        ),
    )


async def _alter_entity(
    ctx: RequestContext,
    zk: ZkSecurityOps,
    parts: dict[str, str | None],
    ops: Any,
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    try:
        entity = _entity(parts)
        changes = _changes(ops)
    except _InvalidRequest as exc:
        return exc.code, str(exc)
    if validate_only:
        return ErrorCode.none, None

    def update(config: dict[str, str]) -> dict[str, str]:
        for key, text in changes:
            if text is None:
                config.pop(key, None)
            else:
                config[key] = text
        return config

    kind, name = entity.config_path()
    try:
        new = await zk.update_entity_config(kind, name, update)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unavailable
        log.warning("altering the quotas of %s failed: %s", entity, exc)
        return ErrorCode.unknown_server_error, f"cannot store the quota: {type(exc).__name__}"
    quotas = ctx.services.quotas
    if quotas is not None:  # this broker at once; the others through /config/changes
        quotas.apply(entity, new)
    return ErrorCode.none, None


def _entity(parts: dict[str, str | None]) -> QuotaEntity:
    """``ZkAdminManager.parseAndSanitizeQuotaEntity``."""
    if not parts:
        raise _InvalidRequest("Invalid empty client quota entity")
    for kind, name in parts.items():
        if kind not in (USER, CLIENT_ID, IP):
            raise _InvalidRequest(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise _InvalidRequest(f"Empty {kind} not supported")
    if IP in parts:
        if len(parts) > 1:
            raise _InvalidRequest(
                "Invalid quota entity combination, IP entity should not be used with "
                "user/client ID entity."
            )
        raise _InvalidRequest("IP connection rate quotas are not supported by Millrace")
    user = _sanitized(parts[USER]) if USER in parts else None
    client = _sanitized(parts[CLIENT_ID]) if CLIENT_ID in parts else None
    return QuotaEntity(user, client)


def _changes(ops: Any) -> list[tuple[str, str | None]]:
    """The (key, stored text or None to remove) of each op, validated as Kafka's
    ``alterEntityQuotas`` does: a removal is not checked; a set needs a quota key, and a
    long key an integral value."""
    out: list[tuple[str, str | None]] = []
    for op in ops:
        key = str(op.key)
        if op.remove:
            out.append((key, None))
            continue
        kind = QUOTA_KEYS.get(key)
        if kind is None:
            raise _InvalidRequest(f"Invalid configuration key {key}")
        value = float(op.value)
        if kind == "LONG":
            epsilon = 1e-6
            if not math.isfinite(value):
                raise _InvalidRequest(f"Configuration {key} must be a LONG value")
            whole = math.trunc(value + epsilon)  # Java's (long) cast
            if abs(whole - value) > epsilon:
                raise _InvalidRequest(f"Configuration {key} must be a LONG value")
            value = float(whole)
        out.append((key, format_value(key, value)))
    return out
