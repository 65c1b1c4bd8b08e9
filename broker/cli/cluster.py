"""``millrace cluster up|down|status|stop-broker|start-broker``: a local cluster in a directory.

Layout of the cluster directory ``D`` (DESIGN.md section 3)::

    D/cluster.json                 what is running: pids, ports, bootstrap servers
    D/zookeeper/                   ZooKeeper's data dir (zoo.cfg, version-2/, zookeeper.log)
    D/zookeeper/zookeeper.out      stdout/stderr of `millrace zookeeper start`
    D/broker-<id>/server.properties
    D/broker-<id>/data/            the broker's log.dirs
    D/broker-<id>/broker.out       stdout/stderr of `millrace broker start` (appended)

Processes run in the background, in sessions of their own, and are stopped by the pids
recorded in ``cluster.json`` (``broker.cli.cluster_process``: command lines, spawning, pid
checks, stopping). A broker counts as up once it has a fresh registration in ZooKeeper
(``broker.cli.cluster_registration``). This module holds ``cluster.json``, the brokers'
``server.properties``, the commands and their options.

The functions (``cluster_up``, ``cluster_down``, ``cluster_status``, ``stop_broker``,
``start_broker``) are importable by tests; they write progress lines to ``progress`` (stderr by
default) and raise :class:`ClusterError` with a clear message (and the tail of the failing
process's output) on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from broker.cli.cluster_process import (
    BROKER_MARKERS,
    HOST,
    ZOOKEEPER_MARKERS,
    ClusterError,
    broker_command,
    forget,
    is_ours,
    say,
    spawn,
    stop_pids,
    tail,
    zookeeper_command,
)
from broker.cli.cluster_registration import wait_registered, wait_unregistered, zk_snapshot
from broker.cli.cluster_security import (
    SECURITY_CHOICES,
    ClusterSecurity,
    create_users,
    listener_for,
)
from broker.cli.cluster_security import describe as describe_security
from broker.cli.cluster_security import prepare as prepare_security
from broker.cli.common import Column, fail, format_table

CLUSTER_FILE = "cluster.json"
DEFAULT_UP_TIMEOUT_S = 120.0
DEFAULT_STOP_TIMEOUT_S = 30.0
ZOOKEEPER_START_TIMEOUT_S = 60.0


def load_cluster(directory: Path) -> dict[str, Any]:
    """``D/cluster.json``; raises :class:`ClusterError` if absent or unreadable."""
    path = Path(directory) / CLUSTER_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"no cluster in {directory} ({path} not found)") from None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ClusterError(f"{path} does not hold a JSON object")
    return data


def write_cluster(directory: Path, info: Mapping[str, Any]) -> None:
    """Write ``D/cluster.json`` atomically (temp file, fsync, rename)."""
    path = Path(directory) / CLUSTER_FILE
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _broker_entry(info: Mapping[str, Any], broker_id: int) -> dict[str, Any]:
    for entry in info.get("brokers", []):
        if entry.get("id") == broker_id:
            return dict(entry)
    known = [b.get("id") for b in info.get("brokers", [])]
    raise ClusterError(f"broker {broker_id} is not part of this cluster (brokers: {known})")


def _replace_broker(info: dict[str, Any], entry: Mapping[str, Any]) -> None:
    info["brokers"] = [dict(entry) if b.get("id") == entry["id"] else b for b in info["brokers"]]


def _write_server_properties(
    path: Path,
    broker_id: int,
    port: int,
    data_dir: Path,
    zk_connect: str,
    overrides: Mapping[str, str],
    security: ClusterSecurity | None = None,
) -> None:
    base = {
        "broker.id": str(broker_id),
        "listeners": listener_for(security.protocol if security else None, HOST, port),
        "log.dirs": str(data_dir),
        "zookeeper.connect": zk_connect,
        **(security.broker_props if security else {}),
    }
    lines = [
        "# Written by `millrace cluster up`; start-broker reuses it.",
        *(f"{k}={v}" for k, v in base.items()),
    ]
    extra = {k: v for k, v in overrides.items() if k not in base}
    if extra:
        lines.append("# --set")
        lines += [f"{k}={v}" for k, v in extra.items()]
    clash = sorted(k for k in overrides if k in base)
    if clash:
        lines.append("# --set overriding the cluster's own values")
        lines += [f"{k}={overrides[k]}" for k in clash]
    path.parent.mkdir(parents=True, exist_ok=True)
    # private: a secured broker's file holds its inter-broker password
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")


def _log_dirs_of(bdir: Path, data_dir: Path, overrides: Mapping[str, str]) -> list[str]:
    """The broker's log dirs as ``cluster.json`` records them: those of ``--set log.dirs``
    (a relative entry is relative to the broker's directory, its working directory), else
    its own ``data`` directory."""
    raw = overrides.get("log.dirs", "")
    dirs = [d.strip() for d in raw.split(",") if d.strip()]
    return [str(bdir / d) for d in dirs] if dirs else [str(data_dir)]


def _validate_overrides(overrides: Mapping[str, str], zk_connect: str) -> None:
    from broker.config import BrokerConfig
    from broker.config_def import ConfigError

    props = {
        "broker.id": "1",
        "listeners": f"PLAINTEXT://{HOST}:9092",
        "log.dirs": "/tmp/unused",
        "zookeeper.connect": zk_connect,
        **overrides,
    }
    try:
        BrokerConfig(props)
    except ConfigError as exc:
        raise ClusterError(f"invalid --set: {exc}") from exc


# --------------------------------------------------------------------------- commands


def _start_zookeeper(
    directory: Path, zk_port: int, progress: IO[str] | None
) -> subprocess.Popen[bytes]:
    from broker.zookeeper import zookeeper_is_serving

    zk_dir = directory / "zookeeper"
    zk_dir.mkdir(parents=True, exist_ok=True)
    out = zk_dir / "zookeeper.out"
    say(progress, f"starting ZooKeeper on {HOST}:{zk_port}")
    proc = spawn(zookeeper_command(zk_port, zk_dir), out, zk_dir)
    deadline = time.monotonic() + ZOOKEEPER_START_TIMEOUT_S
    while not zookeeper_is_serving(HOST, zk_port, timeout=1.0):
        code = proc.poll()
        if code is not None:
            forget(proc.pid)
            raise ClusterError(
                f"ZooKeeper exited with code {code}. Last lines of {out}:\n{tail(out)}\n"
                f"--- {zk_dir / 'zookeeper.log'} ---\n{tail(zk_dir / 'zookeeper.log')}"
            )
        if time.monotonic() >= deadline:
            stop_pids([proc.pid], 10, progress, "ZooKeeper")
            raise ClusterError(
                f"ZooKeeper did not answer on {HOST}:{zk_port} within "
                f"{ZOOKEEPER_START_TIMEOUT_S:g}s. Last lines of {out}:\n{tail(out)}\n"
                f"--- {zk_dir / 'zookeeper.log'} ---\n{tail(zk_dir / 'zookeeper.log')}"
            )
        time.sleep(0.1)
    say(progress, f"ZooKeeper ready (pid {proc.pid})")
    return proc


def _running_pids(info: Mapping[str, Any]) -> list[int]:
    pids = [b.get("pid") for b in info.get("brokers", []) if is_ours(b.get("pid"), BROKER_MARKERS)]
    if is_ours(info.get("zookeeper_pid"), ZOOKEEPER_MARKERS):
        pids.append(info["zookeeper_pid"])
    return [p for p in pids if isinstance(p, int)]


def cluster_up(
    directory: Path,
    brokers: int = 1,
    base_port: int = 9092,
    zk_port: int = 2181,
    overrides: Mapping[str, str] | None = None,
    *,
    timeout: float = DEFAULT_UP_TIMEOUT_S,
    progress: IO[str] | None = sys.stderr,
    security: str | None = None,
) -> dict[str, Any]:
    """Start ZooKeeper and ``brokers`` brokers (ids 1..N on ``base_port``..), wait until all
    are registered and a controller is elected, write and return ``cluster.json``'s content.
    ``security`` (ssl, sasl_plaintext, sasl_ssl) secures the cluster
    (:mod:`broker.cli.cluster_security`). On failure everything started is stopped and
    :class:`ClusterError` raised."""
    from broker.zookeeper import port_is_free

    directory = Path(directory).absolute()
    overrides = dict(overrides or {})
    if brokers < 0:
        raise ClusterError("--brokers must be >= 0")
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / CLUSTER_FILE).exists():
        try:
            running = _running_pids(load_cluster(directory))
        except ClusterError:
            running = []  # unreadable leftovers: overwritten below
        if running:
            raise ClusterError(
                f"a cluster is already running in {directory} (pids {running}); "
                f"run `millrace cluster down --dir {directory}` first"
            )
    zk_connect = f"{HOST}:{zk_port}"
    _validate_overrides(overrides, zk_connect)
    ports = [base_port + i for i in range(brokers)]
    busy = [p for p in [zk_port, *ports] if not port_is_free(HOST, p)]
    if busy:
        raise ClusterError(f"port(s) {busy} on {HOST} already in use")

    secured = prepare_security(directory, security) if security else None
    started: list[int] = []
    zk_proc: subprocess.Popen[bytes] | None = None
    try:
        zk_proc = _start_zookeeper(directory, zk_port, progress)
        if secured is not None and secured.users:
            create_users(zk_connect, secured.users)
            say(progress, f"created SCRAM users {', '.join(sorted(secured.users))}")
        ids = list(range(1, brokers + 1))
        if ids:
            wait_unregistered(zk_connect, ids, timeout, progress)
        stale: dict[int, int | None] = {}
        procs: dict[int, subprocess.Popen[bytes]] = {}
        out_files: dict[int, Path] = {}
        entries: list[dict[str, Any]] = []
        for broker_id, port in zip(ids, ports, strict=True):
            bdir = directory / f"broker-{broker_id}"
            data_dir = bdir / "data"
            config = bdir / "server.properties"
            _write_server_properties(
                config, broker_id, port, data_dir, zk_connect, overrides, secured
            )
            out_files[broker_id] = bdir / "broker.out"
            proc = spawn(broker_command(config), out_files[broker_id], bdir)
            started.append(proc.pid)
            procs[broker_id] = proc
            say(progress, f"started broker {broker_id} on {HOST}:{port} (pid {proc.pid})")
            entries.append(
                {
                    "id": broker_id,
                    "host": HOST,
                    "port": port,
                    "pid": proc.pid,
                    "log_dirs": _log_dirs_of(bdir, data_dir, overrides),
                    "config": str(config),
                    "out": str(out_files[broker_id]),
                }
            )
        controller = None
        if procs:
            controller = wait_registered(zk_connect, procs, stale, out_files, timeout, progress)[
                "controller"
            ]
            say(progress, f"all {len(procs)} broker(s) registered; controller is {controller}")
        cluster_id = zk_snapshot(zk_connect, [])["cluster_id"]
        info: dict[str, Any] = {
            "dir": str(directory),
            "zookeeper": zk_connect,
            "zookeeper_pid": zk_proc.pid,
            "zk_port": zk_port,
            "zookeeper_data_dir": str(directory / "zookeeper"),
            "bootstrap_servers": ",".join(f"{HOST}:{p}" for p in ports),
            "base_port": base_port,
            "set": overrides,
            "cluster_id": cluster_id,
            "controller": controller,
            "state": "up",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "brokers": entries,
        }
        if secured is not None:
            info["security"] = secured.protocol
            info["client_config"] = secured.client_config
            info["client_properties"] = str(secured.client_properties)
            say(progress, describe_security(info))
        write_cluster(directory, info)
        return info
    except BaseException:
        with contextlib.suppress(ClusterError):
            stop_pids(started, DEFAULT_STOP_TIMEOUT_S, progress, "broker")
        if zk_proc is not None:
            with contextlib.suppress(ClusterError):
                stop_pids([zk_proc.pid], 10, progress, "ZooKeeper")
        raise


def cluster_down(
    directory: Path,
    *,
    timeout: float = DEFAULT_STOP_TIMEOUT_S,
    progress: IO[str] | None = sys.stderr,
) -> dict[str, Any]:
    """Stop every broker (SIGTERM, then SIGKILL after ``timeout``), then ZooKeeper. Idempotent:
    dead or unknown pids are skipped; a directory without ``cluster.json`` is a no-op."""
    directory = Path(directory).absolute()
    try:
        info = load_cluster(directory)
    except ClusterError as exc:
        say(progress, f"nothing to stop: {exc}")
        return {}
    broker_pids = [
        b["pid"] for b in info.get("brokers", []) if is_ours(b.get("pid"), BROKER_MARKERS)
    ]
    if broker_pids:
        say(progress, f"stopping broker pid(s) {broker_pids}")
    stop_pids(broker_pids, timeout, progress, "broker")
    for entry in info.get("brokers", []):
        entry["pid"] = None
    zk_pid = info.get("zookeeper_pid")
    if isinstance(zk_pid, int) and is_ours(zk_pid, ZOOKEEPER_MARKERS):
        say(progress, f"stopping ZooKeeper pid {zk_pid}")
        stop_pids([zk_pid], 10, progress, "ZooKeeper")
    info["zookeeper_pid"] = None
    info["controller"] = None
    info["state"] = "down"
    write_cluster(directory, info)
    say(progress, "cluster down")
    return info


def cluster_status(directory: Path) -> dict[str, Any]:
    """Per broker: pid alive, registered in ZooKeeper; ZooKeeper alive; who is controller."""
    from broker.controller.zk_client import ZkError
    from broker.zookeeper import zookeeper_is_serving

    directory = Path(directory).absolute()
    info = load_cluster(directory)
    zk_connect = str(info.get("zookeeper", f"{HOST}:{info.get('zk_port', 2181)}"))
    host, _, port = zk_connect.partition(":")
    serving = zookeeper_is_serving(host, int(port), timeout=1.0)
    ids = [int(b["id"]) for b in info.get("brokers", [])]
    snapshot: dict[str, Any] = {"epochs": {}, "controller": None, "cluster_id": None}
    if serving:
        with contextlib.suppress(ZkError, OSError):
            snapshot = zk_snapshot(zk_connect, ids)
    brokers = [
        {
            "id": b["id"],
            "host": b.get("host"),
            "port": b.get("port"),
            "pid": b.get("pid"),
            "alive": is_ours(b.get("pid"), BROKER_MARKERS),
            "registered": snapshot["epochs"].get(int(b["id"])) is not None if serving else None,
            "broker_epoch": snapshot["epochs"].get(int(b["id"])),
        }
        for b in info.get("brokers", [])
    ]
    return {
        "dir": str(directory),
        "zookeeper": zk_connect,
        "zookeeper_pid": info.get("zookeeper_pid"),
        "zookeeper_alive": is_ours(info.get("zookeeper_pid"), ZOOKEEPER_MARKERS),
        "zookeeper_serving": serving,
        "controller": snapshot["controller"],
        "cluster_id": snapshot["cluster_id"],
        "bootstrap_servers": info.get("bootstrap_servers"),
        "brokers": brokers,
    }


def stop_broker(
    directory: Path,
    broker_id: int,
    *,
    hard: bool = False,
    timeout: float = 60.0,
    progress: IO[str] | None = sys.stderr,
) -> dict[str, Any]:
    """SIGTERM (controlled shutdown) or SIGKILL (``hard``) one broker and wait until it is
    gone (SIGKILL after ``timeout`` if SIGTERM was ignored). Updates ``cluster.json``."""
    directory = Path(directory).absolute()
    info = load_cluster(directory)
    entry = _broker_entry(info, broker_id)
    pid = entry.get("pid")
    if isinstance(pid, int) and is_ours(pid, BROKER_MARKERS):
        say(progress, f"{'killing' if hard else 'stopping'} broker {broker_id} (pid {pid})")
        stop_pids([pid], timeout, progress, f"broker {broker_id}", hard=hard)
    else:
        say(progress, f"broker {broker_id} is not running")
    entry["pid"] = None
    _replace_broker(info, entry)
    write_cluster(directory, info)
    return entry


def start_broker(
    directory: Path,
    broker_id: int,
    *,
    timeout: float = DEFAULT_UP_TIMEOUT_S,
    progress: IO[str] | None = sys.stderr,
) -> dict[str, Any]:
    """Start one broker with its ``server.properties`` and wait for a fresh registration
    (after a hard kill, the new process replaces the old one's stale registration).
    Updates the pid in ``cluster.json``."""
    from broker.zookeeper import zookeeper_is_serving

    directory = Path(directory).absolute()
    info = load_cluster(directory)
    entry = _broker_entry(info, broker_id)
    if is_ours(entry.get("pid"), BROKER_MARKERS):
        raise ClusterError(f"broker {broker_id} is already running (pid {entry['pid']})")
    zk_connect = str(info["zookeeper"])
    host, _, port = zk_connect.partition(":")
    if not zookeeper_is_serving(host, int(port), timeout=1.0):
        raise ClusterError(
            f"ZooKeeper at {zk_connect} is not running; start the cluster with "
            f"`millrace cluster up --dir {directory}`"
        )
    bdir = directory / f"broker-{broker_id}"
    config = Path(entry.get("config") or bdir / "server.properties")
    out = Path(entry.get("out") or bdir / "broker.out")
    # a hard-killed previous process's registration may still be there: the new process
    # replaces it at once (docs/failover.md); wait for a registration with another epoch
    stale: dict[int, int | None] = dict(zk_snapshot(zk_connect, [broker_id])["epochs"])
    proc = spawn(broker_command(config), out, bdir)
    say(progress, f"started broker {broker_id} (pid {proc.pid}); waiting for registration")
    try:
        wait_registered(
            zk_connect,
            {broker_id: proc},
            stale,
            {broker_id: out},
            timeout,
            progress,
            need_controller=False,
        )
    except BaseException:
        with contextlib.suppress(ClusterError):
            stop_pids([proc.pid], DEFAULT_STOP_TIMEOUT_S, progress, f"broker {broker_id}")
        raise
    entry["pid"] = proc.pid
    info = load_cluster(directory)  # re-read: another command may have changed it meanwhile
    _replace_broker(info, entry)
    info["state"] = "up"
    write_cluster(directory, info)
    say(progress, f"broker {broker_id} registered")
    return entry


# --------------------------------------------------------------------------- argparse


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("cluster", help="run a local cluster (ZooKeeper + brokers)")
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="start ZooKeeper and N brokers in the background")
    up.add_argument("--dir", type=Path, required=True, help="cluster directory")
    up.add_argument("--brokers", type=int, default=1, help="number of brokers (default 1)")
    up.add_argument("--base-port", type=int, default=9092, help="first broker port (9092)")
    up.add_argument("--zk-port", type=int, default=2181, help="ZooKeeper port (2181)")
    up.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker property applied to every broker (repeatable)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_UP_TIMEOUT_S,
        help="seconds to wait for registration (default %(default)s)",
    )
    up.add_argument(
        "--security",
        choices=SECURITY_CHOICES,
        default=None,
        help="secure the cluster: TLS (ssl, mutual), SASL/SCRAM (sasl_plaintext) or both "
        "(sasl_ssl), with ACLs; client settings go to cluster.json and client.properties",
    )
    up.set_defaults(func=_run_up)

    down = sub.add_parser("down", help="stop the brokers, then ZooKeeper")
    down.add_argument("--dir", type=Path, required=True)
    down.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_STOP_TIMEOUT_S,
        help="seconds before stragglers get SIGKILL (default %(default)s)",
    )
    down.set_defaults(func=_run_down)

    status = sub.add_parser("status", help="show processes, registrations and the controller")
    status.add_argument("--dir", type=Path, required=True)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=_run_status)

    stop = sub.add_parser("stop-broker", help="stop one broker (SIGTERM, or SIGKILL with --hard)")
    stop.add_argument("--dir", type=Path, required=True)
    stop.add_argument("--broker", type=int, required=True)
    stop.add_argument("--hard", action="store_true", help="SIGKILL instead of SIGTERM")
    stop.add_argument("--timeout", type=float, default=60.0)
    stop.set_defaults(func=_run_stop_broker)

    start = sub.add_parser("start-broker", help="start one broker again")
    start.add_argument("--dir", type=Path, required=True)
    start.add_argument("--broker", type=int, required=True)
    start.add_argument("--timeout", type=float, default=DEFAULT_UP_TIMEOUT_S)
    start.set_defaults(func=_run_start_broker)


def _fail(exc: Exception) -> int:
    return fail("millrace cluster", f"error: {exc}")


def _run_up(args: argparse.Namespace) -> int:
    from broker.config import parse_set_options
    from broker.config_def import ConfigError

    try:
        overrides = parse_set_options(args.set)
        info = cluster_up(
            args.dir,
            args.brokers,
            args.base_port,
            args.zk_port,
            overrides,
            timeout=args.timeout,
            security=args.security,
        )
    except (ClusterError, ConfigError, OSError) as exc:
        return _fail(exc)
    sys.stdout.write(info["bootstrap_servers"] + "\n")
    return 0


def _run_down(args: argparse.Namespace) -> int:
    try:
        cluster_down(args.dir, timeout=args.timeout)
    except (ClusterError, OSError) as exc:
        return _fail(exc)
    return 0


def _run_status(args: argparse.Namespace) -> int:
    try:
        status = cluster_status(args.dir)
    except (ClusterError, OSError) as exc:
        return _fail(exc)
    if args.json:
        sys.stdout.write(json.dumps(status, indent=2) + "\n")
        return 0
    zk = (
        "serving"
        if status["zookeeper_serving"]
        else ("alive, not serving" if status["zookeeper_alive"] else "down")
    )
    head = [
        f"ZooKeeper {status['zookeeper']} (pid {status['zookeeper_pid']}): {zk}",
        f"controller: {status['controller'] if status['controller'] is not None else 'none'}",
        f"bootstrap servers: {status['bootstrap_servers']}",
    ]
    columns = (
        Column("ID", 4, align=">"),
        Column("ADDRESS", 22),
        Column("PID", 8, align=">"),
        Column("ALIVE", 6),
        Column("REGISTERED"),
    )
    rows = [
        (
            b["id"],
            f"{b['host']}:{b['port']}",
            b["pid"] or "-",
            "yes" if b["alive"] else "no",
            {True: "yes", False: "no", None: "unknown"}[b["registered"]]
            + (" (controller)" if b["id"] == status["controller"] else ""),
        )
        for b in status["brokers"]
    ]
    sys.stdout.write("\n".join(head + format_table(columns, rows)) + "\n")
    return 0


def _run_stop_broker(args: argparse.Namespace) -> int:
    try:
        stop_broker(args.dir, args.broker, hard=args.hard, timeout=args.timeout)
    except (ClusterError, OSError) as exc:
        return _fail(exc)
    return 0


def _run_start_broker(args: argparse.Namespace) -> int:
    try:
        start_broker(args.dir, args.broker, timeout=args.timeout)
    except (ClusterError, OSError) as exc:
        return _fail(exc)
    return 0
