"""``millrace users``: SCRAM credentials with the options and output of the SCRAM part of
Kafka's ``kafka-configs.sh --entity-type users``, over AlterUserScramCredentials and
DescribeUserScramCredentials (KIP-554, confluent-kafka's ``AdminClient``).

::

    millrace users --alter --entity-name alice \\
        --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret],SCRAM-SHA-256=[password=x]'
    millrace users --alter --entity-name alice --delete-config SCRAM-SHA-256
    millrace users --describe [--entity-name alice ...]

``--add-config`` takes ``MECHANISM=[iterations=N,password=P]`` items separated by commas
(``iterations`` defaults to 4096, Kafka's minimum); ``--add-config-file F`` the same items as
a properties file (so the password is not on the command line); ``--delete-config`` the
mechanisms whose credential to delete. ``--entity-type users`` is accepted (and is the only
type), ``--user NAME`` is ``--entity-name NAME``.

Output is ``kafka-configs.sh``'s: ``Completed updating config for user alice.`` and
``SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192``.
A password is never printed or logged, in output or in errors.

Errors: a malformed ``--add-config``, an unknown mechanism, too few iterations, a refusal by
the broker: one line on stderr, exit 1; bad usage: exit 2.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from broker.cli.client_settings import admin_client
from broker.cli.common import (
    CliError,
    add_connection_options,
    guard,
    kafka_error_code,
    kafka_error_text,
    read_properties_file,
)

_PROG = "millrace users"

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Credential:
    mechanism: str
    iterations: int
    password: str

    def __repr__(self) -> str:  # never the password
        return f"Credential({self.mechanism}, iterations={self.iterations})"


def split_top_level(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` outside square brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def mechanism_of(name: str, option: str) -> str:
    wanted = name.strip().upper()
    if wanted not in MECHANISMS:
        raise CliError(
            f"{option}: unknown config {name.strip()!r} (millrace users takes "
            f"{' and '.join(MECHANISMS)})"
        )
    return wanted


def parse_credential(mechanism: str, value: str, option: str) -> Credential:
    """``[iterations=N,]password=P`` (brackets optional) for ``mechanism``; errors never
    show the value."""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    m = _CREDENTIAL.fullmatch(text)
    if m is None:
        raise CliError(
            f"{option}: invalid value for {mechanism}: expected "
            f"{mechanism}=[iterations=N,password=P] or {mechanism}=[password=P]"
        )
    raw_iterations, password = m.group(1), m.group(2)
    if re.search(r",\s*iterations=", password):
        # Kafka would take all of it as the password; surely not what was meant
        raise CliError(
            f"{option}: invalid value for {mechanism}: iterations= goes before password= "
            f"({mechanism}=[iterations=N,password=P])"
        )
    iterations = (
        int(raw_iterations) if raw_iterations not in (None, "", "-1") else DEFAULT_ITERATIONS
    )
    if iterations < MIN_ITERATIONS:
        raise CliError(
            f"{option}: Iterations {iterations} is less than the minimum {MIN_ITERATIONS} "
            f"required for {mechanism}"
        )
    if not password:
        raise CliError(f"{option}: the password of {mechanism} is empty")
    return Credential(mechanism, iterations, password)


def parse_add_config(text: str, option: str = "--add-config") -> list[Credential]:
    """Kafka's ``--add-config`` syntax: ``k=v`` items separated by commas outside brackets."""
    out: dict[str, Credential] = {}
    for item in split_top_level(text, ","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(
                f'{option}: all configs to be added must be in the format "key=val" '
                f"(e.g. SCRAM-SHA-512=[password=P])"
            )
        mechanism = mechanism_of(key, option)
        out[mechanism] = parse_credential(mechanism, value, option)
    if not out:
        raise CliError(f"{option}: no config given")
    return list(out.values())


def parse_add_config_file(path: str) -> list[Credential]:
    option = f"--add-config-file {path}"
    props = read_properties_file(path, "--add-config-file")
    if not props:
        raise CliError(f"{option}: no config given")
    return [parse_credential(mechanism_of(k, option), v, option) for k, v in props.items()]


def parse_delete_config(text: str) -> list[str]:
    names = [n for n in (s.strip() for s in text.split(",")) if n]
    if not names:
        raise CliError("--delete-config: no config given")
    return list(dict.fromkeys(mechanism_of(n, "--delete-config") for n in names))


def description_line(user: str, infos: list[tuple[str, int]]) -> str:
    text = ", ".join(f"{m}=iterations={n}" for m, n in sorted(infos))
    return f"SCRAM credential configs for user-principal '{user}' are {text}"


# --- the command ---------------------------------------------------------------------------


def _mechanism_enum(name: str) -> object:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    users = args.entity_name or []
    if len(users) != 1:
        raise CliError("--alter needs exactly one --entity-name")
    user = users[0]
    upserts: list[Credential] = []
    if args.add_config:
        upserts += parse_add_config(args.add_config)
    if args.add_config_file:
        upserts += parse_add_config_file(args.add_config_file)
    deletes = parse_delete_config(args.delete_config) if args.delete_config else []
    if not upserts and not deletes:
        raise CliError("--alter needs --add-config, --add-config-file or --delete-config")
    alterations: list[object] = [
        UserScramCredentialDeletion(user, _mechanism_enum(m))  # type: ignore[arg-type]
        for m in deletes
    ]
    alterations += [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(_mechanism_enum(c.mechanism), c.iterations),  # type: ignore[arg-type]
            c.password.encode("utf-8"),
        )
        for c in upserts
    ]
    admin = admin_client(args)
    futures = admin.alter_user_scram_credentials(
        alterations,  # type: ignore[arg-type]
        request_timeout=args.timeout,
    )
    for future in futures.values():
        future.result()
    sys.stdout.write(f"Completed updating config for user {user}.\n")
    return 0


def describe(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    admin = admin_client(args)
    names = list(dict.fromkeys(args.entity_name or []))
    descriptions: dict[str, object] = {}
    if names:
        futures = admin.describe_user_scram_credentials(names, request_timeout=args.timeout)
        assert isinstance(futures, dict)
        for user, future in futures.items():
            try:
                descriptions[user] = future.result()
            except KafkaException as exc:
                if kafka_error_code(exc) == "RESOURCE_NOT_FOUND":
                    continue  # no credentials: kafka-configs.sh prints nothing either
                sys.stdout.write(
                    f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                    f"{kafka_error_text(exc)}\n"
                )
    else:
        every = admin.describe_user_scram_credentials(request_timeout=args.timeout)
        assert not isinstance(every, dict)
        descriptions = dict(every.result())
    for user in sorted(descriptions):
        infos = [
            (str(i.mechanism.name).replace("_", "-"), int(i.iterations))
            for i in getattr(descriptions[user], "scram_credential_infos", [])
        ]
        if infos:
            sys.stdout.write(description_line(user, infos) + "\n")
    sys.stdout.flush()
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "users",
        help="SCRAM credentials of users (like kafka-configs.sh --entity-type users)",
        description=(__doc__ or "").split("\n\n")[0],
    )
    add_connection_options(p, timeout=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="add or delete credentials")
    action.add_argument("--describe", action="store_true", help="list credentials")
    p.add_argument(
        "--entity-type", choices=("users",), default="users", help="users (the only type)"
    )
    p.add_argument(
        "--entity-name",
        "--user",
        dest="entity_name",
        action="append",
        metavar="NAME",
        help="the user (--describe: repeatable, default every user)",
    )
    p.add_argument(
        "--add-config",
        metavar="CONFIGS",
        help="(--alter) e.g. 'SCRAM-SHA-512=[iterations=8192,password=P],SCRAM-SHA-256=[password=P]'",
    )
    p.add_argument(
        "--add-config-file",
        metavar="FILE",
        help="(--alter) the same as a properties file: SCRAM-SHA-512=[password=P]",
    )
    p.add_argument(
        "--delete-config", metavar="MECHANISMS", help="(--alter) e.g. SCRAM-SHA-256,SCRAM-SHA-512"
    )
    p.set_defaults(func=run, _parser=p)


@guard(_PROG)
def run(args: argparse.Namespace) -> int:
    if args.describe and (args.add_config or args.add_config_file or args.delete_config):
        parser: argparse.ArgumentParser = args._parser
        parser.error("--add-config, --add-config-file and --delete-config go with --alter")
    return alter(args) if args.alter else describe(args)
