"""``millrace broker start --config FILE [--set key=value ...]``: run a broker in the
foreground until SIGTERM or SIGINT, then shut down cleanly (exit code 0). A broker that
stops by itself (every log directory failed) exits with code 1 and says why on stderr."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
from pathlib import Path

from broker import gc_policy
from broker.cli.common import fail

_PROG = "millrace broker"

logger = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("broker", help="run a broker")
    sub = p.add_subparsers(dest="broker_command", metavar="ACTION", required=True)
    start = sub.add_parser("start", help="start a broker in the foreground")
    start.add_argument("--config", required=True, help="server.properties file")
    start.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a broker property (repeatable)",
    )
    start.set_defaults(func=run)


def _dump_tasks() -> None:
    """SIGUSR1: log where every asyncio task is waiting (for diagnosing a stuck broker)."""
    import asyncio
    import io

    for task in asyncio.all_tasks():
        out = io.StringIO()
        task.print_stack(limit=8, file=out)
        logging.getLogger("broker.tasks").warning("%s", out.getvalue())


async def _refresh_gc() -> None:
    while True:
        await asyncio.sleep(gc_policy.REFRESH_S)
        gc_policy.refresh()


def nofile_soft_target(soft: int, hard: int) -> int | None:
    """The soft open-file limit to raise ``soft`` to: the hard limit, or None to leave it
    (already there, or no finite hard limit to raise it to)."""
    if resource.RLIM_INFINITY in (hard, soft) or soft >= hard:
        return None
    return hard


def raise_nofile_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as the JVM does for Kafka
    (HotSpot's ``-XX:+MaxFDLimit``): every partition holds its active ``.log`` open. Never
    fails: the broker runs with the limit it has."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = nofile_soft_target(soft, hard)
        if target is None:
            logger.debug("open-file limit %d (hard %d)", soft, hard)
            return
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        logger.debug("open-file limit %d left as is (raising to %d: %s)", soft, target, exc)
        return
    logger.debug("open-file limit raised from %d to %d", soft, target)


def run(args: argparse.Namespace) -> int:
    from broker.config import BrokerConfig, parse_set_options, read_properties
    from broker.config_def import ConfigError
    from broker.server import Broker

    raise_nofile_limit()
    path = Path(args.config)
    if not path.is_file():
        return fail(_PROG, f"config file {path} not found", code=2)
    try:
        props = read_properties(path)
        props.update(parse_set_options(args.set))
        config = BrokerConfig(props)
    except ConfigError as exc:
        return fail(_PROG, str(exc), code=2)

    broker = Broker(config)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
        gc_policy.install()
        refresher = loop.create_task(_refresh_gc(), name="gc-refresh")
        try:
            await broker.run_until(stop)
        finally:
            refresher.cancel()

    try:
        asyncio.run(main())
    except Exception as exc:
        from broker.log.errors import KafkaStorageError
        from broker.zk.client import ZkError

        if isinstance(exc, ZkError | ConfigError | OSError | KafkaStorageError):
            return fail(_PROG, str(exc))
        raise
    if broker.exit_reason is not None:
        return fail(_PROG, f"broker {broker.broker_id} stopped: {broker.exit_reason}")
    return 0
