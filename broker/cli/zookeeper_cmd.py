"""``millrace zookeeper start``: run the embedded ZooKeeper in the foreground.

The command checks what can be checked in Python (java, pyspark's jars, a free port), writes
``zoo.cfg`` and the log4j2 config into the data directory, then *replaces itself* with the
JVM (``os.execv``). The pid that started the command is therefore the ZooKeeper pid: SIGTERM
or SIGINT to it stops ZooKeeper cleanly, and no Python parent can be killed and leave an
orphaned JVM behind. ZooKeeper's own log goes to ``<data-dir>/zookeeper.log`` (WARN level by
default); the JVM's stdout/stderr stay on the terminal (or the file ``cluster up`` chose).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from broker.cli.common import fail

_PROG = "millrace zookeeper"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("zookeeper", help="run the embedded ZooKeeper")
    sub = parser.add_subparsers(dest="zookeeper_command", metavar="ACTION", required=True)
    start = sub.add_parser(
        "start",
        help="start ZooKeeper in the foreground (until SIGINT/SIGTERM)",
        description="Start ZooKeeper (from the jars in the pyspark wheel) in the foreground.",
    )
    start.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a Kafka-style zookeeper.properties (dataDir, clientPort, tickTime, "
        "maxClientCnxns); the options below override it",
    )
    start.add_argument("--port", type=int, default=None, help="client port (default 2181)")
    start.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (zoo.cfg, snapshots, zookeeper.log)",
    )
    start.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    start.add_argument("--tick-time", type=int, default=None, help="tickTime in ms (default 2000)")
    start.add_argument(
        "--max-client-cnxns",
        type=int,
        default=None,
        help="maxClientCnxns per client address (default 0 = unlimited)",
    )
    start.add_argument(
        "--log-file",
        type=Path,
        default=None,
        help="ZooKeeper's log file (default <data-dir>/zookeeper.log)",
    )
    start.add_argument(
        "--zk-log-level", default="WARN", help="ZooKeeper's log4j level (default WARN)"
    )
    start.set_defaults(func=run_start)


def run_start(args: argparse.Namespace) -> int:
    from broker.config import read_properties
    from broker.zookeeper import EmbeddedZooKeeper, ZooKeeperError, port_is_free

    props: dict[str, str] = {}
    if args.config is not None:
        try:
            props = read_properties(args.config)
        except OSError as exc:
            return fail(_PROG, f"cannot read {args.config}: {exc}", code=2)
    try:
        port = args.port if args.port is not None else int(props.get("clientPort", "2181"))
        tick = args.tick_time if args.tick_time is not None else int(props.get("tickTime", "2000"))
        cnxns = (
            args.max_client_cnxns
            if args.max_client_cnxns is not None
            else int(props.get("maxClientCnxns", "0"))
        )
    except ValueError as exc:
        return fail(_PROG, f"invalid number in {args.config}: {exc}", code=2)
    data_dir = args.data_dir or (Path(props["dataDir"]) if "dataDir" in props else None)
    if data_dir is None:
        return fail(_PROG, "--data-dir is required", code=2)
    host = args.host or props.get("clientPortAddress", "127.0.0.1")

    zk = EmbeddedZooKeeper(
        port,
        data_dir,
        tick_time=tick,
        host=host,
        max_client_cnxns=cnxns,
        log_file=args.log_file,
        log_level=args.zk_log_level,
    )
    if not port_is_free(host, port):
        return fail(_PROG, f"port {host}:{port} is already in use")
    try:
        cmd = zk.prepare()
    except ZooKeeperError as exc:
        return fail(_PROG, str(exc))
    sys.stderr.write(
        f"millrace zookeeper: starting ZooKeeper on {zk.connect_string} (data dir {zk.data_dir}, "
        f"pid {os.getpid()}, log {zk.log_file})\n"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(zk.data_dir)
    os.execv(cmd[0], cmd)
    return 0  # not reached
