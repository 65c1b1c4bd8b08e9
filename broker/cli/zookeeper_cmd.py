"""``millrace zookeeper start``: run the embedded ZooKeeper in the foreground.

The command checks what can be checked in Python (java, pyspark's jars, a free port, an
ensemble's settings), writes ``zoo.cfg`` (and, for an ensemble member, ``myid``) and the
log4j2 config into the data directory, then *replaces itself* with the JVM (``os.execv``).
The pid that started the command is therefore the ZooKeeper pid: SIGTERM or SIGINT to it
stops ZooKeeper cleanly, and no Python parent can be killed and leave an orphaned JVM behind.
ZooKeeper's own log goes to ``<data-dir>/zookeeper.log`` (WARN level by default); the JVM's
stdout/stderr stay on the terminal (or the file ``cluster up`` chose).

Standalone by default; with ``--server`` lines (or ``server.N`` lines in ``--config``) and an
id (``--id``, or the ``myid`` file of the data directory) it runs one member of an ensemble,
so each host of a multi-host ensemble runs one ``millrace zookeeper start``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.cli.common import fail

if TYPE_CHECKING:
    from broker.zk.embedded_server import EmbeddedZooKeeper, QuorumServer

_PROG = "millrace zookeeper"
_SERVER_LINE = re.compile(r"server\.(\d+)")

_EPILOG = """\
an ensemble (one member per host; run the same command on every host, each with its own --id):
  millrace zookeeper start --data-dir /var/lib/zk --host 0.0.0.0 --port 2181 --id 1 \\
      --server 1=zk1.example:2888:3888 --server 2=zk2.example:2888:3888 \\
      --server 3=zk3.example:2888:3888
  or, Kafka-style: --config zookeeper.properties holding dataDir, clientPort, initLimit,
  syncLimit and server.1=zk1.example:2888:3888 ... lines, with the member's id in
  <dataDir>/myid (or given by --id, which then writes myid).
  An ensemble needs an odd number of members (3 or 5): it serves while a majority runs.
  Brokers list every member: zookeeper.connect=zk1.example:2181,zk2.example:2181,...
  A member binds its client port on --host and its peer/election ports on the address of
  its own server.N line.
"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("zookeeper", help="run the embedded ZooKeeper")
    sub = parser.add_subparsers(dest="zookeeper_command", metavar="ACTION", required=True)
    start = sub.add_parser(
        "start",
        help="start ZooKeeper in the foreground (until SIGINT/SIGTERM)",
        description="Start ZooKeeper (from the jars in the pyspark wheel) in the foreground: "
        "a standalone server, or one member of an ensemble (--id and --server, or server.N "
        "lines in --config).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    start.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a Kafka-style zookeeper.properties (dataDir, clientPort, clientPortAddress, "
        "tickTime, maxClientCnxns, initLimit, syncLimit, server.N=HOST:PEER:ELECTION); the "
        "options below override it",
    )
    start.add_argument("--port", type=int, default=None, help="client port (default 2181)")
    start.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (zoo.cfg, myid, snapshots, zookeeper.log)",
    )
    start.add_argument(
        "--host",
        default=None,
        help="address to bind the client port to (default 127.0.0.1; 0.0.0.0 for all)",
    )
    start.add_argument("--tick-time", type=int, default=None, help="tickTime in ms (default 2000)")
    start.add_argument(
        "--max-client-cnxns",
        type=int,
        default=None,
        help="maxClientCnxns per client address (default 0 = unlimited)",
    )
    start.add_argument(
        "--id",
        type=int,
        default=None,
        metavar="N",
        help="this member's server id (1-255) in an ensemble; written to <data-dir>/myid "
        "(default: read from that file)",
    )
    start.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="N=HOST:PEER_PORT:ELECTION_PORT",
        help="one member of the ensemble, this one included (repeat for each; replaces the "
        "server.N lines of --config)",
    )
    start.add_argument(
        "--init-limit",
        type=int,
        default=None,
        help="ensemble: ticks a follower may take to connect and sync to the leader "
        "(initLimit, default 10)",
    )
    start.add_argument(
        "--sync-limit",
        type=int,
        default=None,
        help="ensemble: ticks a follower may lag behind the leader (syncLimit, default 5)",
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


def _int_prop(
    args_value: int | None, props: dict[str, str], key: str, default: int, source: Path | None
) -> int:
    if args_value is not None:
        return args_value
    try:
        return int(props.get(key, str(default)))
    except ValueError:
        raise ValueError(f"{key}={props[key]!r} in {source} is not a number") from None


class _UsageError(Exception):
    """A bad option or config file of ``start`` (exit code 2)."""


def run_start(args: argparse.Namespace) -> int:
    from broker.zk.embedded_server import ZooKeeperError, port_is_free

    try:
        zk = _configured_server(args)
    except _UsageError as exc:
        return fail(_PROG, str(exc), code=2)
    if not port_is_free(zk.host, zk.port):
        return fail(_PROG, f"port {zk.host}:{zk.port} is already in use")
    try:
        cmd = zk.prepare()
    except ZooKeeperError as exc:
        return fail(_PROG, str(exc))
    servers = zk.servers
    role = f"ensemble member {zk.server_id} of {len(servers)}" if servers else "standalone"
    sys.stderr.write(
        f"millrace zookeeper: starting ZooKeeper ({role}) on {zk.connect_string} "
        f"(data dir {zk.data_dir}, pid {os.getpid()}, log {zk.log_file})\n"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(zk.data_dir)
    os.execv(cmd[0], cmd)
    return 0  # not reached


def _configured_server(args: argparse.Namespace) -> EmbeddedZooKeeper:
    """The server the options and the config file (``--config``; options win) describe;
    :class:`_UsageError` if they do not."""
    from broker.config import read_properties
    from broker.zk.embedded_server import (
        DEFAULT_INIT_LIMIT,
        DEFAULT_SYNC_LIMIT,
        EmbeddedZooKeeper,
        ZooKeeperError,
    )

    props: dict[str, str] = {}
    if args.config is not None:
        try:
            props = read_properties(args.config)
        except OSError as exc:
            raise _UsageError(f"cannot read {args.config}: {exc}") from exc
    try:
        port = _int_prop(args.port, props, "clientPort", 2181, args.config)
        tick = _int_prop(args.tick_time, props, "tickTime", 2000, args.config)
        cnxns = _int_prop(args.max_client_cnxns, props, "maxClientCnxns", 0, args.config)
        init_limit = _int_prop(args.init_limit, props, "initLimit", DEFAULT_INIT_LIMIT, args.config)
        sync_limit = _int_prop(args.sync_limit, props, "syncLimit", DEFAULT_SYNC_LIMIT, args.config)
    except ValueError as exc:
        raise _UsageError(f"invalid number: {exc}") from exc
    data_dir = args.data_dir or (Path(props["dataDir"]) if "dataDir" in props else None)
    if data_dir is None:
        raise _UsageError("--data-dir is required")
    host = args.host or props.get("clientPortAddress", "127.0.0.1")

    try:
        server_id, servers = ensemble_settings(args.server, props, args.id, Path(data_dir))
    except (ZooKeeperError, ValueError) as exc:
        raise _UsageError(str(exc)) from exc
    if len(servers) % 2 == 0 and servers:
        sys.stderr.write(
            f"{_PROG}: warning: an ensemble of {len(servers)} members tolerates no more "
            f"failures than one of {len(servers) - 1}; use an odd size (3 or 5)\n"
        )
    return EmbeddedZooKeeper(
        port,
        data_dir,
        tick_time=tick,
        host=host,
        max_client_cnxns=cnxns,
        log_file=args.log_file,
        log_level=args.zk_log_level,
        server_id=server_id,
        servers=servers,
        init_limit=init_limit,
        sync_limit=sync_limit,
    )


def ensemble_settings(
    server_specs: list[str], props: dict[str, str], server_id: int | None, data_dir: Path
) -> tuple[int | None, list[QuorumServer]]:
    """(this member's id, the ensemble's members) from ``--server`` specs (else the
    ``server.N`` lines of ``props``) and ``--id`` (else ``<data_dir>/myid``); ``(None, [])``
    for a standalone server. Raises ``ZooKeeperConfigError`` / ``ValueError`` with a message
    for the user."""
    from broker.zk.embedded_server import check_ensemble, parse_server

    servers: list[QuorumServer] = []
    if server_specs:
        servers = [parse_server(spec) for spec in server_specs]
    else:
        for key, value in props.items():
            match = _SERVER_LINE.fullmatch(key.strip())
            if match:
                servers.append(parse_server(value, int(match.group(1))))
    if servers and server_id is None:
        server_id = _read_myid(data_dir)
    check_ensemble(server_id, servers)
    return (server_id, servers) if servers else (None, [])


def _read_myid(data_dir: Path) -> int | None:
    """The id in ``<data_dir>/myid`` (None if the file is absent); ValueError if unreadable."""
    path = data_dir / "myid"
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{path} holds {text!r}, not a server id") from None
