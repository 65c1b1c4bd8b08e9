"""``millrace acls``: ACL administration with the options and output of Kafka's
``kafka-acls.sh``, over CreateAcls / DescribeAcls / DeleteAcls (confluent-kafka's
``AdminClient``), so it works against any Kafka cluster with an authorizer.

Actions (exactly one): ``--add``, ``--remove``, ``--list``. Resources: ``--topic T``,
``--group G``, ``--transactional-id X`` (each repeatable) and ``--cluster``;
``--resource-pattern-type`` ``literal`` (default), ``prefixed``, or, for ``--list`` and
``--remove``, ``any`` (any pattern type, the name exactly) or ``match`` (every pattern that
applies to the name). Entries: ``--allow-principal`` / ``--deny-principal``
(``PrincipalType:name``, e.g. ``User:alice``), ``--allow-host`` / ``--deny-host`` (default
``*`` when a principal is given), ``--operation`` (Kafka's names, case-insensitive, default
``All``). Conveniences as Kafka expands them: ``--producer`` (WRITE, DESCRIBE, CREATE on the
topics; WRITE, DESCRIBE on the transactional ids; ``--idempotent``: IDEMPOTENT_WRITE on the
cluster) and ``--consumer`` (READ, DESCRIBE on the topics, READ on the groups).

``--remove`` without entries removes every ACL of the resources. It asks for confirmation
(``y``) on a terminal; without one it refuses unless ``--force``. ``--list`` takes
``--principal P`` (repeatable) to show only that principal's entries.

Output is ``kafka-acls.sh``'s::

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

(resources and entries sorted, where Kafka's order is a hash set's). ``--add`` and
``--remove`` print the ACLs of the resources afterwards, as Kafka does.

Errors: a bad principal, an unknown operation or one the resource type does not have, a
missing resource or principal: one line on stderr, exit 1; option combinations that make no
sense (two actions, ``--principal`` without ``--list``, ...): usage, exit 2.
One admin client per command, used from the command's thread.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.cli.client_settings import admin_client
from broker.cli.common import CliError, add_connection_options, guard

if TYPE_CHECKING:
    from confluent_kafka.admin import AclBinding, AdminClient

_PROG = "millrace acls"

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"
CLUSTER_NAME = "kafka-cluster"
WILDCARD_HOST = "*"
LITERAL, PREFIXED, ANY, MATCH = "LITERAL", "PREFIXED", "ANY", "MATCH"
PATTERN_TYPES = (LITERAL, PREFIXED, ANY, MATCH)
ALLOW, DENY = "ALLOW", "DENY"

OPERATIONS = (
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
)
"""Kafka's ACL operations (its ``AclOperation`` names) for the resource types here."""

SUPPORTED_OPERATIONS = {
    TOPIC: (
        "READ",
        "WRITE",
        "CREATE",
        "DESCRIBE",
        "DELETE",
        "ALTER",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    ),
    GROUP: ("READ", "DESCRIBE", "DELETE"),
    CLUSTER: (
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    ),
    TRANSACTIONAL_ID: ("DESCRIBE", "WRITE"),
}
"""Kafka's ``AclEntry.supportedOperations`` (``ALL`` goes with every type)."""


def operation_name(op: str) -> str:
    """Kafka's spelling of an operation on the command line: ``ClusterAction``."""
    return "".join(part.capitalize() for part in op.split("_"))


@dataclass(frozen=True, slots=True, order=True)
class Pattern:
    """A resource pattern, or a filter of them (pattern type ANY / MATCH)."""

    resource_type: str
    name: str
    pattern_type: str

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type}, name={self.name}, "
            f"patternType={self.pattern_type})"
        )


@dataclass(frozen=True, slots=True, order=True)
class Entry:
    principal: str
    host: str
    operation: str
    permission: str

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation}, "
            f"permissionType={self.permission})"
        )


Acls = dict[Pattern, set[Entry]]


# --- parsing the options -------------------------------------------------------------------


def parse_operation(text: str) -> str:
    """``Read``, ``read``, ``AlterConfigs``, ``alter_configs`` -> ``ALTER_CONFIGS``."""
    wanted = re.sub(r"[\s_\-]", "", text).upper()
    for op in OPERATIONS:
        if op.replace("_", "") == wanted:
            return op
    raise CliError(
        f"--operation {text!r}: unknown operation "
        f"({', '.join(operation_name(op) for op in OPERATIONS)})"
    )


def parse_principal(text: str, option: str) -> str:
    """``User:alice`` (Kafka's ``PrincipalType:name``); anything else raises CliError."""
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind.strip() or not name.strip():
        raise CliError(f"{option} {text!r}: expected PrincipalType:name, e.g. User:alice")
    return f"{kind.strip()}:{name.strip()}"


def resource_filters(args: argparse.Namespace, *, required: bool = True) -> list[Pattern]:
    """The resources the options name, with ``--resource-pattern-type``."""
    pattern_type: str = args.resource_pattern_type
    found: list[Pattern] = [Pattern(TOPIC, t.strip(), pattern_type) for t in args.topic]
    if args.cluster or args.idempotent:
        # the cluster resource only ever exists as a LITERAL pattern
        cluster_type = LITERAL if pattern_type == PREFIXED else pattern_type
        found.append(Pattern(CLUSTER, CLUSTER_NAME, cluster_type))
    found += [Pattern(GROUP, g.strip(), pattern_type) for g in args.group]
    found += [Pattern(TRANSACTIONAL_ID, x, pattern_type) for x in args.transactional_id]
    if not found and required:
        raise CliError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --transactional-id <id>"
        )
    return list(dict.fromkeys(found))


def _entries(args: argparse.Namespace, operations: Iterable[str]) -> set[Entry]:
    """Kafka's ``getAcl``: every (principal, host, operation) of the allow and deny options."""
    out: set[Entry] = set()
    ops = list(operations)
    for permission, principals, hosts in (
        (ALLOW, args.allow_principal, args.allow_host),
        (DENY, args.deny_principal, args.deny_host),
    ):
        option = f"--{permission.lower()}-principal"
        names = [parse_principal(p, option) for p in principals]
        if not names:
            continue
        for host in [h.strip() for h in hosts] or [WILDCARD_HOST]:
            out.update(Entry(p, host, op, permission) for p in names for op in ops)
    return out


_PRODUCER_OPERATIONS: dict[str, tuple[str, ...]] = {
    TOPIC: ("WRITE", "DESCRIBE", "CREATE"),
    TRANSACTIONAL_ID: ("WRITE", "DESCRIBE"),
}
"""``--producer``: the operations granted on each type of resource given."""
_CONSUMER_OPERATIONS: dict[str, tuple[str, ...]] = {
    TOPIC: ("READ", "DESCRIBE"),
    GROUP: ("READ",),
}
"""``--consumer``: the operations granted on each type of resource given."""


def requested_acls(args: argparse.Namespace) -> Acls:
    """Kafka's ``getResourceFilterToAcls``: the entries each resource gets (or loses)."""
    acls: Acls = {}
    if not args.producer and not args.consumer:
        operations = [parse_operation(o) for o in (args.operation or ["All"])]
        entries = _entries(args, operations)
        for pattern in resource_filters(args):
            acls[pattern] = set(entries)
    if args.producer:
        for pattern in resource_filters(args):
            ops = _PRODUCER_OPERATIONS.get(pattern.resource_type)
            if ops is not None:
                acls[pattern] = _entries(args, ops)
        if args.idempotent:
            acls[Pattern(CLUSTER, CLUSTER_NAME, LITERAL)] = _entries(args, ("IDEMPOTENT_WRITE",))
    if args.consumer:
        for pattern in resource_filters(args):
            ops = _CONSUMER_OPERATIONS.get(pattern.resource_type)
            if ops is not None:
                acls[pattern] = _entries(args, ops) | acls.get(pattern, set())
    _check_operations(acls)
    return acls


def _check_operations(acls: Acls) -> None:
    """Refuse an operation the resource's type does not support."""
    for pattern, entries in acls.items():
        valid = (*SUPPORTED_OPERATIONS[pattern.resource_type], "ALL")
        if any(e.operation not in valid for e in entries):
            raise CliError(
                f"ResourceType {pattern.resource_type} only supports operations "
                f"{', '.join(operation_name(op) for op in valid)}"
            )


def check_options(args: argparse.Namespace) -> str | None:
    """Kafka's ``checkArgs``: the usage error of an option combination, or None."""
    excluded = _excluded_option(args)
    if excluded is not None:
        return excluded
    if args.principal and not args.list:
        return "The --principal option is only available if --list is set"
    if args.producer and not args.topic:
        return "With --producer you must specify a --topic"
    if args.idempotent and not args.producer:
        return "The --idempotent option is only available if --producer is set"
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        return (
            "With --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified."
        )
    return None


def _excluded_option(args: argparse.Namespace) -> str | None:
    """The usage error of an option given with ``--list``, or with ``--producer`` or
    ``--consumer``, that they exclude; or None."""
    if args.list:
        for dest, option in (
            ("producer", "--producer"),
            ("consumer", "--consumer"),
            ("allow_host", "--allow-host"),
            ("allow_principal", "--allow-principal"),
            ("deny_host", "--deny-host"),
            ("deny_principal", "--deny-principal"),
        ):
            if getattr(args, dest):
                return f"{option} cannot be used with --list"
    if args.producer or args.consumer:
        for dest, option in (
            ("operation", "--operation"),
            ("deny_principal", "--deny-principal"),
            ("deny_host", "--deny-host"),
        ):
            if getattr(args, dest):
                return f"{option} cannot be used with --producer or --consumer"
    return None


# --- output --------------------------------------------------------------------------------


def resource_lines(acls: Mapping[Pattern, Iterable[Entry]], heading: str) -> list[str]:
    """Kafka's block per resource: ``<heading> `<pattern>`: `` then the entries."""
    out: list[str] = []
    for pattern in sorted(acls):
        entries = "\n".join(f"\t{e}" for e in sorted(acls[pattern]))
        out.append(f"{heading} `{pattern}`: \n {entries} \n\n")
    return out


def listing(acls: Mapping[Pattern, set[Entry]], principals: list[str]) -> list[str]:
    """What ``--list`` prints (and ``--add`` / ``--remove`` after their change)."""
    if not principals:
        return resource_lines(acls, "Current ACLs for resource")
    out: list[str] = []
    for principal in principals:
        out.append(f"ACLs for principal `{principal}`\n")
        mine = {p: {e for e in es if e.principal == principal} for p, es in acls.items()}
        out += resource_lines({p: es for p, es in mine.items() if es}, "Current ACLs for resource")
    return out


# --- talking to the cluster ----------------------------------------------------------------


def _restype(resource_type: str) -> Any:
    from confluent_kafka.admin import ResourceType

    return ResourceType.BROKER if resource_type == CLUSTER else ResourceType[resource_type]


def _binding_filter(pattern: Pattern, entry: Entry | None) -> Any:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    make: Any = AclBindingFilter  # its stubs do not allow None (any) where it does
    return make(
        _restype(pattern.resource_type),
        pattern.name,
        ResourcePatternType[pattern.pattern_type],
        entry.principal if entry else None,
        entry.host if entry else None,
        AclOperation[entry.operation] if entry else AclOperation.ANY,
        AclPermissionType[entry.permission] if entry else AclPermissionType.ANY,
    )


def _binding(pattern: Pattern, entry: Entry) -> AclBinding:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    return AclBinding(
        _restype(pattern.resource_type),
        pattern.name,
        ResourcePatternType[pattern.pattern_type],
        entry.principal,
        entry.host,
        AclOperation[entry.operation],
        AclPermissionType[entry.permission],
    )


def _from_binding(binding: Any) -> tuple[Pattern, Entry]:
    restype = binding.restype.name
    pattern = Pattern(
        CLUSTER if restype == "BROKER" else restype,
        str(binding.name),
        binding.resource_pattern_type.name,
    )
    entry = Entry(
        str(binding.principal),
        str(binding.host),
        binding.operation.name,
        binding.permission_type.name,
    )
    return pattern, entry


def describe(admin: AdminClient, filters: list[Pattern], timeout: float) -> Acls:
    """The ACLs matching ``filters`` (every ACL when there is none), by resource."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    make: Any = AclBindingFilter  # its stubs do not allow None (any) where it does
    wanted = (
        [_binding_filter(f, None) for f in filters]
        if filters
        else [
            make(
                ResourceType.ANY,
                None,
                ResourcePatternType.ANY,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    )
    acls: Acls = {}
    for binding_filter in wanted:
        for binding in admin.describe_acls(binding_filter, request_timeout=timeout).result():
            pattern, entry = _from_binding(binding)
            acls.setdefault(pattern, set()).add(entry)
    return acls


def _write(lines: Iterable[str]) -> None:
    for line in lines:
        sys.stdout.write(line)
    sys.stdout.flush()


def _list_after(args: argparse.Namespace, admin: AdminClient) -> None:
    filters = resource_filters(args, required=False)
    principals = [parse_principal(p, "--principal") for p in args.principal]
    _write(listing(describe(admin, filters, args.timeout), principals))


def confirm(args: argparse.Namespace, question: str) -> bool:
    """``--force``, or a ``y`` answer on a terminal; CliError without a terminal."""
    if args.force:
        return True
    if not sys.stdin.isatty():
        raise CliError(
            "--remove asks for confirmation and stdin is not a terminal: add --force "
            "(nothing was removed)"
        )
    sys.stdout.write(question + "\n")
    sys.stdout.flush()
    return sys.stdin.readline().strip().lower() == "y"


def add(args: argparse.Namespace) -> int:
    if args.resource_pattern_type not in (LITERAL, PREFIXED):
        raise CliError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not "
            "valid when adding acls."
        )
    acls = requested_acls(args)
    if any(not entries for entries in acls.values()):
        raise CliError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    admin = admin_client(args)
    for pattern in sorted(acls):
        _write(resource_lines({pattern: acls[pattern]}, "Adding ACLs for resource"))
        futures = admin.create_acls(
            [_binding(pattern, e) for e in sorted(acls[pattern])], request_timeout=args.timeout
        )
        for future in futures.values():
            future.result()
    _list_after(args, admin)
    return 0


def remove(args: argparse.Namespace) -> int:
    acls = requested_acls(args)
    admin = admin_client(args)
    for pattern in sorted(acls):
        entries = sorted(acls[pattern])
        if entries:
            listed = "\n".join(f"\t{e}" for e in entries)
            question = (
                f"Are you sure you want to remove ACLs: \n {listed} \n from resource filter "
                f"`{pattern}`? (y/n)"
            )
        else:
            question = (
                f"Are you sure you want to delete all ACLs for resource filter `{pattern}`? (y/n)"
            )
        if not confirm(args, question):
            continue
        filters = [_binding_filter(pattern, e) for e in entries] or [_binding_filter(pattern, None)]
        for future in admin.delete_acls(filters, request_timeout=args.timeout).values():
            future.result()
    _list_after(args, admin)
    return 0


def list_acls(args: argparse.Namespace) -> int:
    _list_after(args, admin_client(args))
    return 0


# --- the command ---------------------------------------------------------------------------


def pattern_type(text: str) -> str:
    value = text.strip().upper()
    if value not in PATTERN_TYPES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected one of {', '.join(p.lower() for p in PATTERN_TYPES)}"
        )
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "acls",
        help="add, remove and list ACLs (like kafka-acls.sh)",
        description=(__doc__ or "").split("\n\n")[0],
    )
    add_connection_options(p, timeout=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs")
    action.add_argument("--remove", action="store_true", help="remove the ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    res = p.add_argument_group("resources")
    res.add_argument("--topic", action="append", default=[], metavar="T", help="topic (repeatable)")
    res.add_argument("--group", action="append", default=[], metavar="G", help="consumer group")
    res.add_argument("--cluster", action="store_true", help="the cluster")
    res.add_argument(
        "--transactional-id", action="append", default=[], metavar="ID", help="transactional id"
    )
    res.add_argument(
        "--resource-pattern-type",
        type=pattern_type,
        default=LITERAL,
        metavar="literal|prefixed|any|match",
        help="how resource names match (default literal; any and match: --list, --remove)",
    )
    ent = p.add_argument_group("entries")
    ent.add_argument(
        "--allow-principal",
        action="append",
        default=[],
        metavar="TYPE:NAME",
        help="principal to allow, e.g. User:alice (repeatable)",
    )
    ent.add_argument(
        "--deny-principal", action="append", default=[], metavar="TYPE:NAME", help="to deny"
    )
    ent.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST", help="(default *)"
    )
    ent.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="(default *)")
    ent.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, All (default All; repeatable)",
    )
    ent.add_argument(
        "--producer", action="store_true", help="ACLs of a producer (WRITE, DESCRIBE, CREATE)"
    )
    ent.add_argument(
        "--idempotent", action="store_true", help="(--producer) also IDEMPOTENT_WRITE on cluster"
    )
    ent.add_argument(
        "--consumer", action="store_true", help="ACLs of a consumer (READ, DESCRIBE; group READ)"
    )
    p.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="TYPE:NAME",
        help="(--list) only this principal's ACLs (repeatable)",
    )
    p.add_argument("--force", action="store_true", help="(--remove) do not ask for confirmation")
    p.set_defaults(func=run, _parser=p)


@guard(_PROG)
def run(args: argparse.Namespace) -> int:
    problem = check_options(args)
    if problem:
        parser: argparse.ArgumentParser = args._parser
        parser.error(problem)
    if args.add:
        return add(args)
    if args.remove:
        return remove(args)
    return list_acls(args)
