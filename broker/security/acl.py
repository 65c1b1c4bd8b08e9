"""ACLs as Kafka models them: a resource pattern (type, name, LITERAL or PREFIXED) and an
entry (principal, host, operation, ALLOW or DENY); Kafka's wire codes for each enum, the
filters of DescribeAcls/DeleteAcls, and the znode JSON of Kafka's ZooKeeper ACL store.

ZooKeeper layout (Kafka's ``ZkAclStore``):

* LITERAL patterns: ``/kafka-acl/<ResourceType>/<name>``; changes announced by
  ``/kafka-acl-changes/acl_changes_<seq>`` holding ``<ResourceType>:<name>``.
* PREFIXED patterns: ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``; changes announced
  by ``/kafka-acl-extended-changes/acl_changes_<seq>`` holding
  ``{"version":1,"resourceType":"Topic","name":"<name>","patternType":"PREFIXED"}``.
* A resource's znode: ``{"version":1,"acls":[{"principal":"User:alice",
  "permissionType":"Allow","operation":"Read","host":"*"}]}``.

Concurrency: pure values and functions.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

ACL_PATH = "/kafka-acl"
ACL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_ACL_PATH = "/kafka-acl-extended/prefixed"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def zk_name(self) -> str:
        """The name Kafka uses in znode paths (``Topic``, ``TransactionalId``)."""
        return _RESOURCE_NAMES[self]

    @classmethod
    def from_zk(cls, name: str) -> ResourceType:
        for value, text in _RESOURCE_NAMES.items():
            if text.lower() == name.lower():
                return value
        raise ValueError(f"unknown resource type {name!r}")


_RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}

STORED_TYPES = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.DELEGATION_TOKEN,
    ResourceType.USER,
)


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def zk_name(self) -> str:
        """``Read``, ``ClusterAction``, ``DescribeConfigs`` (Kafka's JSON)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_zk(cls, name: str) -> Operation:
        for op in cls:
            if op.zk_name.lower() == name.lower() or op.name.lower() == name.lower():
                return op
        raise ValueError(f"unknown operation {name!r}")


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def zk_name(self) -> str:
        return self.name.capitalize()

    @classmethod
    def from_zk(cls, name: str) -> Permission:
        return cls[name.upper()]


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def znode(self) -> str:
        base = EXTENDED_ACL_PATH if self.pattern == PatternType.PREFIXED else ACL_PATH
        return f"{base}/{self.type.zk_name}/{self.name}"

    def change_notice(self) -> tuple[str, bytes]:
        """(the changes directory, the notification's data) for a change of this pattern."""
        if self.pattern == PatternType.PREFIXED:
            data = {
                "version": 1,
                "resourceType": self.type.zk_name,
                "name": self.name,
                "patternType": "PREFIXED",
            }
            return EXTENDED_ACL_CHANGES_PATH, json.dumps(data).encode()
        return ACL_CHANGES_PATH, f"{self.type.zk_name}:{self.name}".encode()


def pattern_of_notice(directory: str, data: bytes) -> ResourcePattern:
    """The resource pattern a change notification names (see :meth:`change_notice`)."""
    text = data.decode()
    if directory == EXTENDED_ACL_CHANGES_PATH:
        obj = json.loads(text)
        return ResourcePattern(
            ResourceType.from_zk(obj["resourceType"]),
            obj["name"],
            PatternType[str(obj.get("patternType", "PREFIXED")).upper()],
        )
    kind, _, name = text.partition(":")
    return ResourcePattern(ResourceType.from_zk(kind), name, PatternType.LITERAL)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": self.permission.zk_name,
            "operation": self.operation.zk_name,
            "host": self.host,
        }

    @classmethod
    def from_json(cls, obj: dict[str, str]) -> AccessControlEntry:
        return cls(
            str(obj["principal"]),
            str(obj.get("host", WILDCARD)),
            Operation.from_zk(str(obj["operation"])),
            Permission.from_zk(str(obj["permissionType"])),
        )


AclUpdate = Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
"""What an ACL store applies to a pattern's entries, read-modify-write: the new entries."""


def encode_acls(entries: frozenset[AccessControlEntry]) -> bytes:
    ordered = sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))
    return json.dumps({"version": 1, "acls": [e.to_json() for e in ordered]}).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    if not data:
        return frozenset()
    obj = json.loads(data.decode())
    return frozenset(AccessControlEntry.from_json(x) for x in obj.get("acls", ()))


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls filter: None fields match anything (Kafka's ANY / null)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.type):
            return False
        if self.pattern_type == PatternType.MATCH:
            return self.name is None or _applies_to(pattern, self.name)
        if self.pattern_type not in (PatternType.ANY, pattern.pattern):
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (Operation.ANY, entry.operation)
            and self.permission in (Permission.ANY, entry.permission)
        )

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def _applies_to(pattern: ResourcePattern, name: str) -> bool:
    """Whether a stored ``pattern`` applies to the resource ``name`` (a MATCH filter): a
    LITERAL one by that name or the wildcard, a PREFIXED one that ``name`` starts with."""
    if pattern.pattern == PatternType.LITERAL:
        return pattern.name in (name, WILDCARD)
    return name.startswith(pattern.name)
