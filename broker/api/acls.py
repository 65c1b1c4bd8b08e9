"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), over the ZooKeeper ACL store, as
Kafka's ``AclApis`` with the AclAuthorizer: DescribeAcls needs DESCRIBE on the cluster, the
others ALTER; without an authorizer every one answers SECURITY_DISABLED. A creation with
an unknown or ANY type, a pattern other than LITERAL or PREFIXED, a principal that is not
``Type:name``, an operation or permission of ANY, or a cluster named other than
``kafka-cluster`` fails with INVALID_REQUEST (the others of the request still apply).

Concurrency: handlers on the event loop; the authorizer serialises nothing (ZooKeeper's
conditional writes do).
"""

from __future__ import annotations

import datetime
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

_NO_TIME = datetime.timedelta(0)
_DISABLED = "No Authorizer is configured on the broker"


class InvalidAcl(ValueError):
    pass


def _enum(kind: Any, value: int, what: str) -> Any:
    try:
        return kind(int(value))
    except ValueError:
        raise InvalidAcl(f"unknown {what} {value}") from None


def _binding(c: Any) -> AclBinding:
    rtype = _enum(ResourceType, c.resource_type, "resource type")
    if rtype in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidAcl("an ACL needs a concrete resource type")
    pattern = _enum(PatternType, getattr(c, "resource_pattern_type", 3), "pattern type")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl("an ACL's pattern type must be LITERAL or PREFIXED")
    name = str(c.resource_name)
    if not name:
        raise InvalidAcl("an ACL needs a resource name")
    if rtype == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidAcl(f"the cluster resource is named {CLUSTER_NAME}")
    principal = str(c.principal)
    kind, sep, pname = principal.partition(":")
    if not sep or not kind or not pname:
        raise InvalidAcl(f"invalid principal {principal!r}: expected Type:name")
    operation = _enum(Operation, c.operation, "operation")
    if operation in (Operation.ANY, Operation.UNKNOWN):
        raise InvalidAcl("an ACL needs a concrete operation")
    permission = _enum(Permission, c.permission_type, "permission type")
    if permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl("an ACL's permission must be ALLOW or DENY")
    host = str(c.host)
    return AclBinding(
        ResourcePattern(rtype, name, pattern),
        AccessControlEntry(principal, host, operation, permission),
    )


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type=_enum(ResourceType, f.resource_type_filter, "resource type"),
        name=f.resource_name_filter,
        pattern_type=_enum(PatternType, getattr(f, "pattern_type_filter", 3), "pattern type"),
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_enum(Operation, f.operation, "operation"),
        permission=_enum(Permission, f.permission_type, "permission type"),
    )


async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.DESCRIBE_ACLS, ctx.version)
    resource_cls = registry.nested(cls, "DescribeAclsResource")
    acl_cls = registry.nested(cls, "AclDescription")
    authorizer = ctx.services.authorizer

    def fail(code: ErrorCode, message: str) -> Any:
        return cls(throttle_time=_NO_TIME, error_code=code, error_message=message, resources=())

    if authorizer is None:
        return fail(ErrorCode.security_disabled, _DISABLED)
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return fail(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    try:
        flt = _filter(request)
    except InvalidAcl as exc:
        return fail(ErrorCode.invalid_request, str(exc))
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in authorizer.bindings(flt):
        grouped.setdefault(b.pattern, []).append(b.entry)
    resources = tuple(
        registry.build(
            resource_cls,
            resource_type=int(p.type),
            resource_name=p.name,
            pattern_type=int(p.pattern),
            acls=tuple(
                acl_cls(
                    principal=e.principal,
                    host=e.host,
                    operation=int(e.operation),
                    permission_type=int(e.permission),
                )
                for e in entries
            ),
        )
        for p, entries in grouped.items()
    )
    return cls(
        throttle_time=_NO_TIME, error_code=ErrorCode.none, error_message=None, resources=resources
    )


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.CREATE_ACLS, ctx.version)
    result_cls = registry.nested(cls, "AclCreationResult")
    authorizer = ctx.services.authorizer
    creations = tuple(request.creations)

    def all_fail(code: ErrorCode, message: str) -> Any:
        return cls(
            throttle_time=_NO_TIME,
            results=tuple(result_cls(error_code=code, error_message=message) for _ in creations),
        )

    if authorizer is None:
        return all_fail(ErrorCode.security_disabled, _DISABLED)
    if not ctx.authorize_cluster(Operation.ALTER):
        return all_fail(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    results: list[Any] = []
    valid: list[AclBinding] = []
    for c in creations:
        try:
            valid.append(_binding(c))
            results.append(result_cls(error_code=ErrorCode.none, error_message=None))
        except InvalidAcl as exc:
            results.append(result_cls(error_code=ErrorCode.invalid_request, error_message=str(exc)))
    try:
        await authorizer.create(valid)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unavailable: every creation failed
        return all_fail(ErrorCode.unknown_server_error, f"cannot store the ACLs: {exc}")
    return cls(throttle_time=_NO_TIME, results=tuple(results))


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.DELETE_ACLS, ctx.version)
    result_cls = registry.nested(cls, "DeleteAclsFilterResult")
    match_cls = registry.nested(cls, "DeleteAclsMatchingAcl")
    authorizer = ctx.services.authorizer
    filters = tuple(request.filters)

    def fail(code: ErrorCode, message: str) -> Any:
        return result_cls(error_code=code, error_message=message, matching_acls=())

    if authorizer is None:
        return cls(
            throttle_time=_NO_TIME,
            filter_results=tuple(fail(ErrorCode.security_disabled, _DISABLED) for _ in filters),
        )
    if not ctx.authorize_cluster(Operation.ALTER):
        message = "Cluster authorization failed."
        return cls(
            throttle_time=_NO_TIME,
            filter_results=tuple(
                fail(ErrorCode.cluster_authorization_failed, message) for _ in filters
            ),
        )
    out = []
    for f in filters:
        try:
            flt = _filter(f)
            deleted = await authorizer.delete(flt)
        except InvalidAcl as exc:
            out.append(fail(ErrorCode.invalid_request, str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - ZooKeeper unavailable
            out.append(fail(ErrorCode.unknown_server_error, f"cannot delete the ACLs: {exc}"))
            continue
        out.append(
            result_cls(
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=tuple(
                    registry.build(
                        match_cls,
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=int(b.pattern.type),
                        resource_name=b.pattern.name,
                        pattern_type=int(b.pattern.pattern),
                        principal=b.entry.principal,
                        host=b.entry.host,
                        operation=int(b.entry.operation),
                        permission_type=int(b.entry.permission),
                    )
                    for b in deleted
                ),
            )
        )
    return cls(throttle_time=_NO_TIME, filter_results=tuple(out))
