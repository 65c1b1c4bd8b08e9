"""DescribeClientQuotas and AlterClientQuotas (broker/api/client_quotas.py) against an
in-memory store of ``/config/<type>/<name>``: Kafka's validation, its describe filter
semantics (exact, default, any; strict), authorization, and the quota configs kept beside a
user's SCRAM credentials."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.schema.alter_client_quotas.v1 import request as alter_req
from kio.schema.describe_client_quotas.v1 import request as describe_req
from kio.serial import entity_reader

from broker.api.client_quotas import handle_alter_client_quotas, handle_describe_client_quotas
from broker.api.context import RequestContext
from broker.config import BrokerConfig
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.response import ConnectionInfo
from broker.quota.entities import QuotaEntity
from broker.quota.manager import ClientQuotas, quota_settings

pytestmark = pytest.mark.unit

SCRAM = "salt=c2FsdA==,stored_key=a2V5,server_key=c2Vy,iterations=4096"


class FakeEntityStore:
    """``/config/<type>/<name>`` configs, as ZkSecurityOps exposes them."""

    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}
        self.notices: list[str] = []

    async def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        return dict(self.configs.get(f"{entity_type}/{name}", {}))

    async def list_entities(self, entity_type: str) -> list[str]:
        prefix = f"{entity_type}/"
        return sorted(
            {p[len(prefix) :].split("/")[0] for p in self.configs if p.startswith(prefix)}
        )

    async def update_entity_config(
        self, entity_type: str, name: str, update: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        path = f"{entity_type}/{name}"
        new = update(dict(self.configs.get(path, {})))
        self.configs[path] = new
        self.notices.append(path)
        return new


class Authorizer:
    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.asked: list[Any] = []

    def authorize(self, principal: str, peer: str, op: Any, rtype: Any, name: str) -> bool:
        self.asked.append(op)
        return self.allowed


def ctx(
    api_key: ApiKey,
    store: FakeEntityStore,
    quotas: ClientQuotas | None = None,
    allowed: bool = True,
) -> RequestContext:
    services = SimpleNamespace(zk_security=store, quotas=quotas, authorizer=Authorizer(allowed))
    return RequestContext(
        RequestHeader(int(api_key), 1, 7, "test"),
        ConnectionInfo("127.0.0.1:1", "PLAINTEXT", 1),
        cast(Any, services),
    )


def roundtrip(response: Any) -> Any:
    value, _ = entity_reader(type(response))(registry.encode(response), 0)
    assert value == response
    return value


def alter(
    store: FakeEntityStore,
    entries: list[tuple[dict[str, str | None], dict[str, float | None]]],
    *,
    validate_only: bool = False,
    quotas: ClientQuotas | None = None,
    allowed: bool = True,
) -> list[tuple[dict[str, str | None], int, str | None]]:
    request = alter_req.AlterClientQuotasRequest(
        entries=tuple(
            alter_req.EntryData(
                entity=tuple(
                    alter_req.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()
                ),
                ops=tuple(
                    alter_req.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                    for k, v in ops.items()
                ),
            )
            for entity, ops in entries
        ),
        validate_only=validate_only,
    )
    response = roundtrip(
        asyncio.run(
            handle_alter_client_quotas(
                ctx(ApiKey.ALTER_CLIENT_QUOTAS, store, quotas, allowed), request
            )
        )
    )
    return [
        (
            {e.entity_type: e.entity_name for e in entry.entity},
            int(entry.error_code),
            entry.error_message,
        )
        for entry in response.entries
    ]


def describe(
    store: FakeEntityStore,
    components: list[tuple[str, int, str | None]],
    strict: bool,
    allowed: bool = True,
) -> Any:
    request = describe_req.DescribeClientQuotasRequest(
        components=tuple(
            describe_req.ComponentData(entity_type=t, match_type=m, match=n)
            for t, m, n in components
        ),
        strict=strict,
    )
    return roundtrip(
        asyncio.run(
            handle_describe_client_quotas(
                ctx(ApiKey.DESCRIBE_CLIENT_QUOTAS, store, None, allowed), request
            )
        )
    )


def entries(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == ErrorCode.none, response
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def test_alter_writes_kafkas_znodes_and_keeps_scram_credentials() -> None:
    store = FakeEntityStore()
    store.configs["users/alice"] = {"SCRAM-SHA-512": SCRAM}
    quotas = ClientQuotas()
    results = alter(
        store,
        [
            ({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 200.0}),
            ({"user": "alice", "client-id": None}, {"consumer_byte_rate": 10.0}),
            ({"user": None}, {"producer_byte_rate": 5.0}),
            ({"client-id": "a b*"}, {"consumer_byte_rate": 7.0}),
        ],
        quotas=quotas,
    )
    assert [code for _, code, _ in results] == [0, 0, 0, 0]
    assert store.configs == {
        "users/alice": {
            "SCRAM-SHA-512": SCRAM,
            "producer_byte_rate": "1024",
            "request_percentage": "200.0",
        },
        "users/alice/clients/<default>": {"consumer_byte_rate": "10"},
        "users/<default>": {"producer_byte_rate": "5"},
        "clients/a%20b%2A": {"consumer_byte_rate": "7"},
    }
    # this broker applies them at once
    assert quotas.produce.quota("alice", "x") == 1024.0
    assert quotas.fetch.quota("alice", "x") == 10.0
    assert quotas.produce.quota("bob", "x") == 5.0
    # removing a key leaves the credential
    assert (
        alter(store, [({"user": "alice"}, {"producer_byte_rate": None})], quotas=quotas)[0][1] == 0
    )
    assert store.configs["users/alice"] == {"SCRAM-SHA-512": SCRAM, "request_percentage": "200.0"}
    assert quotas.produce.quota("alice", "x") == 5.0  # the default user's now


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ({}, {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
        ({"group": "g"}, {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: group"),
        ({"user": ""}, {"producer_byte_rate": 1.0}, "Empty user not supported"),
        ({"client-id": "c"}, {"SCRAM-SHA-256": 1.0}, "Invalid configuration key SCRAM-SHA-256"),
        ({"client-id": "c"}, {"producer_byte_rate": 1.5}, "must be a LONG value"),
        ({"client-id": "c"}, {"consumer_byte_rate": -5.0}, "must be a LONG value"),
        ({"ip": "1.2.3.4", "user": "u"}, {"producer_byte_rate": 1.0}, "IP entity should not"),
        ({"ip": "1.2.3.4"}, {"connection_creation_rate": 1.0}, "not supported"),
    ],
)
def test_alter_refuses_what_kafka_refuses(
    entity: dict[str, str | None], ops: dict[str, float | None], message: str
) -> None:
    store = FakeEntityStore()
    [(_, code, text)] = alter(store, [(entity, ops)])
    assert code == ErrorCode.invalid_request
    assert text is not None and message in text
    assert store.configs == {} and store.notices == []


def test_alter_validate_only_and_per_entity_results() -> None:
    store = FakeEntityStore()
    results = alter(
        store,
        [
            ({"client-id": "ok"}, {"producer_byte_rate": 100.0}),
            ({"client-id": "bad"}, {"producer_byte_rate": 0.5}),
        ],
        validate_only=True,
    )
    assert [(e, c) for e, c, _ in results] == [
        ({"client-id": "ok"}, 0),
        ({"client-id": "bad"}, int(ErrorCode.invalid_request)),
    ]
    assert store.configs == {}
    # a removal is not validated (Kafka removes whatever key is named)
    assert alter(store, [({"client-id": "c"}, {"no_such_key": None})])[0][1] == 0


def test_without_cluster_permissions_nothing_is_shown_or_changed() -> None:
    store = FakeEntityStore()
    store.configs["clients/c"] = {"producer_byte_rate": "1"}
    [(_, code, text)] = alter(
        store, [({"client-id": "c"}, {"producer_byte_rate": 2.0})], allowed=False
    )
    assert code == ErrorCode.cluster_authorization_failed
    assert text == "Cluster authorization failed."
    assert store.configs == {"clients/c": {"producer_byte_rate": "1"}}
    response = describe(store, [], strict=False, allowed=False)
    assert response.error_code == ErrorCode.cluster_authorization_failed
    assert response.entries is None


def _store() -> FakeEntityStore:
    store = FakeEntityStore()
    store.configs.update(
        {
            "users/alice": {"SCRAM-SHA-512": SCRAM, "producer_byte_rate": "1"},
            "users/bob": {"SCRAM-SHA-512": SCRAM},  # no quota: never listed
            "users/<default>": {"producer_byte_rate": "2"},
            "users/alice/clients/c1": {"consumer_byte_rate": "3"},
            "users/<default>/clients/<default>": {"request_percentage": "4.5"},
            "clients/c1": {"producer_byte_rate": "5"},
            "clients/<default>": {"producer_byte_rate": "6"},
        }
    )
    return store


EXACT, DEFAULT_MATCH, ANY = 0, 1, 2
ALICE = (("user", "alice"),)
ALICE_C1 = (("client-id", "c1"), ("user", "alice"))


def test_describe_everything_without_a_filter() -> None:
    got = entries(describe(_store(), [], strict=False))
    assert got == {
        ALICE: {"producer_byte_rate": 1.0},
        (("user", None),): {"producer_byte_rate": 2.0},
        ALICE_C1: {"consumer_byte_rate": 3.0},
        (("client-id", None), ("user", None)): {"request_percentage": 4.5},
        (("client-id", "c1"),): {"producer_byte_rate": 5.0},
        (("client-id", None),): {"producer_byte_rate": 6.0},
    }
    assert entries(describe(_store(), [], strict=True)) == {}


def test_describe_filters_as_kafka_configs_uses_them() -> None:
    store = _store()
    # --entity-type users --entity-name alice
    assert entries(describe(store, [("user", EXACT, "alice")], strict=True)) == {
        ALICE: {"producer_byte_rate": 1.0}
    }
    # the same, not strict: alice's (user, client id) entities too
    assert set(entries(describe(store, [("user", EXACT, "alice")], strict=False))) == {
        ALICE,
        ALICE_C1,
    }
    # --entity-type users: every user entity, the default included
    assert set(entries(describe(store, [("user", ANY, None)], strict=True))) == {
        ALICE,
        (("user", None),),
    }
    # --entity-type users --entity-default
    assert set(entries(describe(store, [("user", DEFAULT_MATCH, None)], strict=True))) == {
        (("user", None),)
    }
    # --entity-type users --entity-type clients
    assert set(
        entries(describe(store, [("user", ANY, None), ("client-id", ANY, None)], strict=True))
    ) == {ALICE_C1, (("client-id", None), ("user", None))}
    # --entity-type clients --entity-name c1
    assert set(entries(describe(store, [("client-id", EXACT, "c1")], strict=True))) == {
        (("client-id", "c1"),)
    }
    # IP quotas: none can exist here
    assert entries(describe(store, [("ip", ANY, None)], strict=True)) == {}


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ([("user", ANY, None), ("user", EXACT, "x")], ErrorCode.invalid_request, "Duplicate user"),
        ([("", ANY, None)], ErrorCode.invalid_request, "empty filter component"),
        ([("group", ANY, None)], ErrorCode.unsupported_version, "Custom entity type 'group'"),
        ([("ip", ANY, None), ("user", ANY, None)], ErrorCode.invalid_request, "IP filter"),
        ([("user", 7, None)], ErrorCode.invalid_request, "Unexpected match type: 7"),
    ],
)
def test_describe_refuses_bad_filters(
    components: list[tuple[str, int, str | None]], code: ErrorCode, message: str
) -> None:
    response = describe(_store(), components, strict=False)
    assert response.error_code == code
    assert message in response.error_message
    assert response.entries is None


def test_quota_settings_come_from_the_broker_config() -> None:
    default = quota_settings(BrokerConfig({}))
    assert (default.samples, default.window_seconds) == (11, 1)
    assert default.producer_default is None and default.consumer_default is None
    cfg = BrokerConfig(
        {
            "quota.window.num": "3",
            "quota.window.size.seconds": "2",
            "quota.producer.default": "1000",
        }
    )
    settings = quota_settings(cfg)
    assert (settings.samples, settings.window_seconds, settings.producer_default) == (3, 2, 1000.0)
    quotas = ClientQuotas(settings)
    assert quotas.enabled and quotas.produce.quota("u", "c") == 1000.0
    assert quotas.fetch.max_value_in_window("u", "c") is None
    assert QuotaEntity("u", None) not in quotas.configs()
