"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554: what
``kafka-configs.sh --bootstrap-server ... --entity-type users --alter --add-config
'SCRAM-SHA-512=[password=...]'`` sends. Credentials live in ``/config/users/<user>``
(Kafka's format, :mod:`kafka_security.scram`); the client sends a salt and the salted
password, never the password.

Checks as Kafka's: DESCRIBE (describe) or ALTER (alter) on the cluster, else
CLUSTER_AUTHORIZATION_FAILED; a user named twice: DUPLICATE_RESOURCE; an unknown user
(describe) or a deletion of a credential that does not exist: RESOURCE_NOT_FOUND; an unknown
mechanism: UNSUPPORTED_SASL_MECHANISM; iterations outside 4096..16384, an empty name, salt
or password: UNACCEPTABLE_CREDENTIAL.

Concurrency: handlers on the event loop; ZooKeeper writes are conditional.
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.quota.entities import desanitize, sanitize
from broker.security.acl import Operation
from broker.security.credentials import USERS
from kafka_security.scram import (
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    credential_from_salted,
    user_credentials,
)

_NO_TIME = datetime.timedelta(0)
_CODES = {name: code for code, name in MECHANISM_CODES.items()}


async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.version)
    result_cls = registry.nested(cls, "DescribeUserScramCredentialsResult")
    info_cls = registry.nested(cls, "CredentialInfo")
    zk = ctx.services.zk_security
    if not ctx.authorize_cluster(Operation.DESCRIBE) or zk is None:
        return cls(
            throttle_time=_NO_TIME,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed." if zk is not None else "no ZooKeeper",
            results=(),
        )
    # null or empty: every user (librdkafka and kafka-configs.sh send an empty list)
    wanted = [str(u.name) for u in request.users] if request.users else None
    names = [desanitize(e) for e in await zk.list_entities(USERS)] if wanted is None else wanted
    counts = Counter(wanted or ())
    results = []
    for user in dict.fromkeys(names):
        if counts.get(user, 0) > 1:
            results.append(
                result_cls(
                    user=user,
                    error_code=ErrorCode.duplicate_resource,
                    error_message=f"Cannot describe SCRAM credentials for the same user twice "
                    f"in a single request: {user}",
                    credential_infos=(),
                )
            )
            continue
        creds = user_credentials(await zk.get_entity_config(USERS, sanitize(user)))
        if not creds:
            if wanted is not None:
                results.append(
                    result_cls(
                        user=user,
                        error_code=ErrorCode.resource_not_found,
                        error_message=f"Attempt to describe a user credential that does not "
                        f"exist: {user}",
                        credential_infos=(),
                    )
                )
            continue
        results.append(
            result_cls(
                user=user,
                error_code=ErrorCode.none,
                error_message=None,
                credential_infos=tuple(
                    info_cls(mechanism=_CODES[m], iterations=c.iterations)
                    for m, c in sorted(creds.items())
                ),
            )
        )
    return cls(
        throttle_time=_NO_TIME,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ctx.version)
    result_cls = registry.nested(cls, "AlterUserScramCredentialsResult")
    zk = ctx.services.zk_security
    deletions = list(request.deletions)
    upsertions = list(request.upsertions)
    users = list(
        dict.fromkeys([str(d.name) for d in deletions] + [str(u.name) for u in upsertions])
    )
    if not ctx.authorize_cluster(Operation.ALTER) or zk is None:
        return cls(
            throttle_time=_NO_TIME,
            results=tuple(
                result_cls(
                    user=u,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.",
                )
                for u in users
            ),
        )
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: Counter[tuple[str, int]] = Counter(
        [(str(d.name), int(d.mechanism)) for d in deletions]
        + [(str(u.name), int(u.mechanism)) for u in upsertions]
    )
    for (user, _mech), n in seen.items():
        if n > 1:
            errors.setdefault(
                user,
                (
                    ErrorCode.duplicate_resource,
                    f"A user credential cannot be altered twice in the same request: {user}",
                ),
            )
    for item in [*deletions, *upsertions]:
        user = str(item.name)
        if not user:
            errors.setdefault(
                user, (ErrorCode.unacceptable_credential, "Username must not be empty")
            )
        if int(item.mechanism) not in MECHANISM_CODES:
            errors.setdefault(
                user,
                (
                    ErrorCode.unsupported_sasl_mechanism,
                    f"Unknown SCRAM mechanism: {int(item.mechanism)}",
                ),
            )
    for u in upsertions:
        user = str(u.name)
        if not MIN_ITERATIONS <= int(u.iterations) <= MAX_ITERATIONS:
            errors.setdefault(
                user,
                (
                    ErrorCode.unacceptable_credential,
                    f"Iterations {int(u.iterations)} must be between {MIN_ITERATIONS} and "
                    f"{MAX_ITERATIONS}",
                ),
            )
        if not bytes(u.salt) or not bytes(u.salted_password):
            errors.setdefault(
                user, (ErrorCode.unacceptable_credential, "Salt and salted password must be set")
            )
    results = []
    for user in users:
        if user in errors:
            code, text = errors[user]
            results.append(result_cls(user=user, error_code=code, error_message=text))
            continue
        code, message = await _alter_user(
            ctx,
            user,
            [MECHANISM_CODES[int(d.mechanism)] for d in deletions if str(d.name) == user],
            [u for u in upsertions if str(u.name) == user],
        )
        results.append(result_cls(user=user, error_code=code, error_message=message))
    return cls(throttle_time=_NO_TIME, results=tuple(results))


async def _alter_user(
    ctx: RequestContext, user: str, deletions: list[str], upsertions: list[Any]
) -> tuple[ErrorCode, str | None]:
    zk = ctx.services.zk_security
    assert zk is not None

    def update(config: dict[str, str]) -> dict[str, str]:
        for mechanism in deletions:
            config.pop(mechanism, None)
        for u in upsertions:
            mechanism = MECHANISM_CODES[int(u.mechanism)]
            cred = credential_from_salted(
                mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
            )
            config[mechanism] = cred.to_text()
        return config

    current = await zk.get_entity_config(USERS, sanitize(user))
    absent = [m for m in deletions if m not in current]
    if absent:
        return (
            ErrorCode.resource_not_found,
            f"Attempt to delete a user credential that does not exist: {user} {absent[0]}",
        )
    try:
        await zk.update_entity_config(USERS, sanitize(user), update)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unavailable
        return ErrorCode.unknown_server_error, f"cannot store the credential: {type(exc).__name__}"
    if ctx.services.credentials is not None:
        await ctx.services.credentials.reload(user)
    return ErrorCode.none, None
