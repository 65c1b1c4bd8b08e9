"""The ``millrace`` command: an argparse dispatcher over subcommand modules.

Each subcommand module exposes ``add_parser(subparsers) -> None`` and sets ``func`` (taking
the parsed ``argparse.Namespace`` and returning an exit code) with ``set_defaults``.
Subcommand modules import their heavy dependencies inside ``func`` so ``millrace --help``
stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = (
    "broker.cli.zookeeper_cmd",
    "broker.cli.broker_cmd",
    "broker.cli.cluster",
    "broker.cli.topics",
    "broker.cli.groups",
    "broker.cli.reassign",
    "broker.cli.elect_leaders",
    "broker.cli.transactions",
    "broker.cli.console",
    "broker.cli.web_console.command",
    "broker.cli.perf",
    "broker.cli.dump_log",
    "broker.cli.table",
    "broker.cli.acls",
    "broker.cli.users",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="millrace",
        description="Millrace: a Kafka-compatible event streaming platform built for Spark.",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    parser.add_argument(
        "--log-config",
        default=None,
        metavar="FILE",
        help="logging dictConfig JSON file (e.g. conf/logging.json)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # subcommand not built yet
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from broker.cli.logsetup import configure

    configure(str(args.log_level), args.log_config)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
