"""``millrace cluster up|down|status|stop-broker|start-broker|stop-zookeeper|start-zookeeper``:
a local cluster in a directory.

Layout of the cluster directory ``D`` (DESIGN.md section 3)::

    D/cluster.json                 what is running: pids, ports, bootstrap servers
    D/zookeeper/                   ZooKeeper's data dir (zoo.cfg, version-2/, zookeeper.log)
    D/zookeeper/zookeeper.out      stdout/stderr of `millrace zookeeper start`
    D/zookeeper-<n>/               instead, with --zookeepers 3 or 5: node n of the ensemble
                                   (zoo.cfg, myid, version-2/, zookeeper.log, zookeeper.out)
    D/broker-<id>/server.properties
    D/broker-<id>/data/            the broker's log.dirs
    D/broker-<id>/broker.out       stdout/stderr of `millrace broker start` (appended)

Processes run in the background, in sessions of their own, and are stopped by the pids
recorded in ``cluster.json`` (``broker.cli.cluster_process``: command lines, spawning, pid
checks, stopping). A broker counts as up once it has a fresh registration in ZooKeeper
(``broker.cli.cluster_registration``). This module holds ``cluster.json``, the brokers'
``server.properties``, the commands and their options.

ZooKeeper is one node (``--zookeepers 1``, the default) or an ensemble of 3 or 5 nodes on
consecutive client ports from ``--zk-port`` (peer and election ports from ``--zk-peer-port``
and ``--zk-election-port``). ``cluster.json``'s ``zookeeper`` is the full connect string
(every node, as the brokers' ``zookeeper.connect``), ``zookeepers`` lists each node (id,
ports, data dir, pid), and ``zookeeper_pid`` / ``zk_port`` are node 1's. An ensemble is ready
when a majority of its nodes answers ``srvr`` with Mode leader or follower.

Each broker serves Prometheus metrics on a port of its own, chosen free at ``cluster up`` and
kept in its ``server.properties``; its ``cluster.json`` entry has ``metrics_url``
(``broker.cli.cluster_metrics``; ``--set metrics.http.listener=`` turns them off).

The functions (``cluster_up``, ``cluster_down``, ``cluster_status``, ``stop_broker``,
``start_broker``, ``stop_zookeeper``, ``start_zookeeper``) are importable by tests; they write progress lines to ``progress`` (stderr by
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

from broker.cli.cluster_metrics import PROPERTY as METRICS_PROPERTY
from broker.cli.cluster_metrics import MetricsPort, plan_metrics_ports
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
ZOOKEEPER_SIZES = (1, 3, 5)
DEFAULT_ZK_PEER_PORT = 2888
DEFAULT_ZK_ELECTION_PORT = 3888


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
    metrics: MetricsPort | None = None,
) -> None:
    base = {
        "broker.id": str(broker_id),
        "listeners": listener_for(security.protocol if security else None, HOST, port),
        "log.dirs": str(data_dir),
        "zookeeper.connect": zk_connect,
        **(security.broker_props if security else {}),
        # this broker's own port (cluster_metrics.py), or off
        METRICS_PROPERTY: metrics.listener if metrics is not None else "",
    }
    overrides = {k: v for k, v in overrides.items() if k != METRICS_PROPERTY}
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


def check_zookeepers(count: int) -> None:
    """Raise :class:`ClusterError` unless ``count`` is a usable ensemble size (1, 3 or 5)."""
    if count in ZOOKEEPER_SIZES:
        return
    if count > 0 and count % 2 == 0:
        raise ClusterError(
            f"--zookeepers {count}: ZooKeeper needs an odd ensemble size: 1, 3 or 5 (an "
            f"ensemble serves while a majority of its nodes runs, so {count} nodes survive "
            f"no more failures than {count - 1})"
        )
    raise ClusterError(f"--zookeepers {count}: the ensemble size must be 1, 3 or 5")


def plan_zookeepers(
    directory: Path,
    count: int,
    zk_port: int,
    peer_port: int = DEFAULT_ZK_PEER_PORT,
    election_port: int = DEFAULT_ZK_ELECTION_PORT,
) -> list[dict[str, Any]]:
    """The ``zookeepers`` entries of ``cluster.json`` for ``count`` nodes (not started yet:
    ``pid`` None). One node: ``D/zookeeper`` on ``zk_port``, as before ensembles existed.
    Node n of an ensemble: ``D/zookeeper-<n>``, client port ``zk_port + n - 1``, peer port
    ``peer_port + n - 1``, election port ``election_port + n - 1``."""
    check_zookeepers(count)
    directory = Path(directory)
    if count == 1:
        zk_dir = directory / "zookeeper"
        return [
            {
                "id": 1,
                "host": HOST,
                "port": zk_port,
                "peer_port": None,
                "election_port": None,
                "data_dir": str(zk_dir),
                "out": str(zk_dir / "zookeeper.out"),
                "pid": None,
            }
        ]
    nodes = []
    for n in range(1, count + 1):
        zk_dir = directory / f"zookeeper-{n}"
        nodes.append(
            {
                "id": n,
                "host": HOST,
                "port": zk_port + n - 1,
                "peer_port": peer_port + n - 1,
                "election_port": election_port + n - 1,
                "data_dir": str(zk_dir),
                "out": str(zk_dir / "zookeeper.out"),
                "pid": None,
            }
        )
    return nodes


def zookeeper_connect(nodes: list[dict[str, Any]]) -> str:
    """The connect string naming every node (``host:port,host:port,...``)."""
    return ",".join(f"{n['host']}:{n['port']}" for n in nodes)


def zookeeper_nodes(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``zookeepers`` entries of ``cluster.json`` (copies); for a file written before
    ensembles existed, the one node its ``zookeeper_pid`` / ``zk_port`` describe."""
    nodes = info.get("zookeepers")
    if isinstance(nodes, list) and nodes:
        return [dict(n) for n in nodes]
    from broker.zk.embedded_server import parse_connect_string

    connect = str(info.get("zookeeper") or f"{HOST}:{info.get('zk_port', 2181)}")
    host, port = parse_connect_string(connect)[0]
    zk_dir = Path(
        str(info.get("zookeeper_data_dir") or Path(str(info.get("dir", "."))) / "zookeeper")
    )
    return [
        {
            "id": 1,
            "host": host,
            "port": port,
            "peer_port": None,
            "election_port": None,
            "data_dir": str(zk_dir),
            "out": str(zk_dir / "zookeeper.out"),
            "pid": info.get("zookeeper_pid"),
        }
    ]


def _set_zookeeper_nodes(info: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """Record ``nodes`` in ``info``, node 1's pid also as ``zookeeper_pid``."""
    info["zookeepers"] = nodes
    info["zookeeper_pid"] = nodes[0].get("pid") if nodes else None


def _node_entry(nodes: list[dict[str, Any]], node_id: int) -> dict[str, Any]:
    for node in nodes:
        if node.get("id") == node_id:
            return node
    known = [n.get("id") for n in nodes]
    raise ClusterError(
        f"ZooKeeper node {node_id} is not part of this cluster (nodes: {known}); "
        f"--node takes one of {known}"
    )


def _node_command(node: Mapping[str, Any], nodes: list[dict[str, Any]]) -> list[str]:
    if len(nodes) == 1:
        return zookeeper_command(int(node["port"]), Path(node["data_dir"]))
    specs = [f"{n['id']}={n['host']}:{n['peer_port']}:{n['election_port']}" for n in nodes]
    return zookeeper_command(
        int(node["port"]), Path(node["data_dir"]), server_id=int(node["id"]), servers=specs
    )


def _node_ports(nodes: list[dict[str, Any]]) -> list[int]:
    ports = []
    for n in nodes:
        ports += [int(n[k]) for k in ("port", "peer_port", "election_port") if n.get(k)]
    return ports


def _spawn_zookeeper(
    node: dict[str, Any], nodes: list[dict[str, Any]], progress: IO[str] | None
) -> subprocess.Popen[bytes]:
    """Start one node in the background (its pid goes into ``node``); no waiting."""
    zk_dir = Path(node["data_dir"])
    zk_dir.mkdir(parents=True, exist_ok=True)
    what = "ZooKeeper" if len(nodes) == 1 else f"ZooKeeper node {node['id']}"
    proc = spawn(_node_command(node, nodes), Path(node["out"]), zk_dir)
    node["pid"] = proc.pid
    say(progress, f"started {what} on {node['host']}:{node['port']} (pid {proc.pid})")
    return proc


def _node_tails(node: Mapping[str, Any]) -> str:
    out = Path(node["out"])
    zk_log = Path(node["data_dir"]) / "zookeeper.log"
    return f"Last lines of {out}:\n{tail(out)}\n--- {zk_log} ---\n{tail(zk_log)}"


def _node_modes(nodes: list[dict[str, Any]]) -> dict[int, str | None]:
    """{node id: ``srvr`` mode, "not serving", or None when nothing answers}."""
    from broker.zk.embedded_server import zookeeper_mode

    return {int(n["id"]): zookeeper_mode(n["host"], int(n["port"]), timeout=1.0) for n in nodes}


def _wait_zookeepers(
    nodes: list[dict[str, Any]],
    procs: Mapping[int, subprocess.Popen[bytes]],
    need: int,
    timeout: float,
    *,
    serving: bool = True,
) -> dict[int, str | None]:
    """Until ``need`` of ``nodes`` serve (``srvr`` Mode leader/follower/standalone), or, with
    ``serving`` False, merely answer. Raises :class:`ClusterError` (with the output of the
    nodes concerned) when a process of ``procs`` exits or ``timeout`` passes."""
    from broker.zk.embedded_server import SERVING_MODES

    deadline = time.monotonic() + timeout
    while True:
        modes = _node_modes(nodes)
        ok = [i for i, m in modes.items() if (m in SERVING_MODES if serving else m is not None)]
        if len(ok) >= need:
            return modes
        for node_id, proc in procs.items():
            code = proc.poll()
            if code is not None:
                forget(proc.pid)
                node = _node_entry(nodes, node_id)
                name = "ZooKeeper" if len(nodes) == 1 else f"ZooKeeper node {node_id}"
                raise ClusterError(f"{name} exited with code {code}. {_node_tails(node)}")
        if time.monotonic() >= deadline:
            late = [n for n in nodes if int(n["id"]) not in ok]
            tails = "\n".join(f"--- node {n['id']} ---\n{_node_tails(n)}" for n in late)
            if len(nodes) == 1:
                raise ClusterError(
                    f"ZooKeeper did not answer on {zookeeper_connect(nodes)} within "
                    f"{timeout:g}s. {_node_tails(nodes[0])}"
                )
            raise ClusterError(
                f"the ZooKeeper ensemble {zookeeper_connect(nodes)} did not "
                f"{'serve' if serving else 'answer'} within {timeout:g}s: {len(ok)} of "
                f"{len(nodes)} node(s) ready, {need} needed (modes {modes}).\n{tails}"
            )
        time.sleep(0.1)


def _start_zookeepers(
    nodes: list[dict[str, Any]], progress: IO[str] | None
) -> list[subprocess.Popen[bytes]]:
    """Start every node and wait until a quorum serves; on failure stop them all."""
    from broker.zk.embedded_server import quorum_size

    if len(nodes) == 1:
        say(progress, f"starting ZooKeeper on {nodes[0]['host']}:{nodes[0]['port']}")
    else:
        say(progress, f"starting a ZooKeeper ensemble of {len(nodes)}: {zookeeper_connect(nodes)}")
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for node in nodes:
            procs[int(node["id"])] = _spawn_zookeeper(node, nodes, progress)
        modes = _wait_zookeepers(nodes, procs, quorum_size(len(nodes)), ZOOKEEPER_START_TIMEOUT_S)
    except BaseException:
        with contextlib.suppress(ClusterError):
            stop_pids([p.pid for p in procs.values()], 10, progress, "ZooKeeper")
        raise
    if len(nodes) == 1:
        say(progress, f"ZooKeeper ready (pid {nodes[0]['pid']})")
    else:
        shown = ", ".join(f"{i}: {m or 'starting'}" for i, m in modes.items())
        say(progress, f"ZooKeeper ensemble ready (a quorum serves; {shown})")
    return list(procs.values())


def _zookeeper_pids(info: Mapping[str, Any]) -> list[int]:
    """The running ZooKeeper pids of ``info`` (every node's, and the legacy key's)."""
    pids = [n.get("pid") for n in zookeeper_nodes(info)]
    pids.append(info.get("zookeeper_pid"))
    out: list[int] = []
    for pid in pids:
        if isinstance(pid, int) and pid not in out and is_ours(pid, ZOOKEEPER_MARKERS):
            out.append(pid)
    return out


def _running_pids(info: Mapping[str, Any]) -> list[int]:
    pids = [b.get("pid") for b in info.get("brokers", []) if is_ours(b.get("pid"), BROKER_MARKERS)]
    pids += _zookeeper_pids(info)
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
    zookeepers: int = 1,
    zk_peer_port: int = DEFAULT_ZK_PEER_PORT,
    zk_election_port: int = DEFAULT_ZK_ELECTION_PORT,
) -> dict[str, Any]:
    """Start ZooKeeper (one node, or an ensemble of ``zookeepers`` 3 or 5 nodes, see
    :func:`plan_zookeepers`) and ``brokers`` brokers (ids 1..N on ``base_port``..), wait
    until all are registered and a controller is elected, write and return
    ``cluster.json``'s content. ``security`` (ssl, sasl_plaintext, sasl_ssl) secures the
    cluster (:mod:`broker.cli.cluster_security`). On failure everything started is stopped
    and :class:`ClusterError` raised."""
    directory = Path(directory).absolute()
    overrides = dict(overrides or {})
    if brokers < 0:
        raise ClusterError("--brokers must be >= 0")
    nodes = plan_zookeepers(directory, zookeepers, zk_port, zk_peer_port, zk_election_port)
    directory.mkdir(parents=True, exist_ok=True)
    _check_previous(directory, zookeepers)
    zk_connect = zookeeper_connect(nodes)
    _validate_overrides(overrides, zk_connect)
    ports = [base_port + i for i in range(brokers)]
    metrics_ports = _check_ports(nodes, ports, overrides)

    secured = prepare_security(directory, security) if security else None
    started: list[int] = []
    zk_procs: list[subprocess.Popen[bytes]] = []
    try:
        zk_procs = _start_zookeepers(nodes, progress)
        if secured is not None and secured.users:
            create_users(zk_connect, secured.users)
            say(progress, f"created SCRAM users {', '.join(sorted(secured.users))}")
        ids = list(range(1, brokers + 1))
        if ids:
            wait_unregistered(zk_connect, ids, timeout, progress)
        procs: dict[int, subprocess.Popen[bytes]] = {}
        out_files: dict[int, Path] = {}
        entries: list[dict[str, Any]] = []
        for broker_id, port, metrics in zip(ids, ports, metrics_ports, strict=True):
            bdir = directory / f"broker-{broker_id}"
            out_files[broker_id] = bdir / "broker.out"
            config = _broker_config(bdir, broker_id, port, zk_connect, overrides, secured, metrics)
            procs[broker_id] = proc = spawn(broker_command(config), out_files[broker_id], bdir)
            started.append(proc.pid)
            say(progress, f"started broker {broker_id} on {HOST}:{port} (pid {proc.pid})")
            entries.append(_started_entry(bdir, broker_id, port, proc.pid, overrides, metrics))
        controller = None
        if procs:
            controller = wait_registered(zk_connect, procs, {}, out_files, timeout, progress)[
                "controller"
            ]
            say(progress, f"all {len(procs)} broker(s) registered; controller is {controller}")
        info = _cluster_info(
            directory, nodes, ports, base_port, overrides, controller, entries, secured
        )
        if secured is not None:
            say(progress, describe_security(info))
        write_cluster(directory, info)
        return info
    except BaseException:
        with contextlib.suppress(ClusterError):
            stop_pids(started, DEFAULT_STOP_TIMEOUT_S, progress, "broker")
        if zk_procs:
            with contextlib.suppress(ClusterError):
                stop_pids([p.pid for p in zk_procs], 10, progress, "ZooKeeper")
        raise


def _check_previous(directory: Path, zookeepers: int) -> None:
    """Refuse to start over a cluster still running in ``directory``, or over one created
    with another number of ZooKeeper nodes (their data directories hold its metadata)."""
    if not (directory / CLUSTER_FILE).exists():
        return
    try:
        previous: dict[str, Any] | None = load_cluster(directory)
    except ClusterError:
        previous = None  # unreadable leftovers: overwritten by cluster_up
    running = _running_pids(previous) if previous is not None else []
    if running:
        raise ClusterError(
            f"a cluster is already running in {directory} (pids {running}); "
            f"run `millrace cluster down --dir {directory}` first"
        )
    before = len(zookeeper_nodes(previous)) if previous is not None else zookeepers
    if before != zookeepers and previous is not None and previous.get("brokers"):
        raise ClusterError(
            f"--zookeepers {zookeepers}: the cluster in {directory} was created with "
            f"--zookeepers {before}, whose data directories hold its metadata; use "
            f"--zookeepers {before} or a new --dir"
        )


def _check_ports(
    nodes: list[dict[str, Any]], ports: list[int], overrides: Mapping[str, str]
) -> list[MetricsPort | None]:
    """Refuse ports used twice or already in use; return each broker's metrics endpoint."""
    from broker.zk.embedded_server import port_is_free

    wanted = [*_node_ports(nodes), *ports]
    clash = sorted({p for p in wanted if wanted.count(p) > 1})
    if clash:
        raise ClusterError(
            f"port(s) {clash} would be used twice (ZooKeeper client ports from --zk-port, "
            "peer ports from --zk-peer-port, election ports from --zk-election-port, broker "
            "ports from --base-port)"
        )
    busy = [p for p in wanted if not port_is_free(HOST, p)]
    if busy:
        raise ClusterError(f"port(s) {busy} on {HOST} already in use")
    metrics_ports = plan_metrics_ports(overrides, len(ports), taken=wanted)
    busy = [m.port for m in metrics_ports if m is not None and not port_is_free(m.host, m.port)]
    if busy:
        raise ClusterError(f"{METRICS_PROPERTY} port(s) {busy} already in use")
    return metrics_ports


def _broker_config(
    bdir: Path,
    broker_id: int,
    port: int,
    zk_connect: str,
    overrides: Mapping[str, str],
    secured: ClusterSecurity | None,
    metrics: MetricsPort | None,
) -> Path:
    """Write the broker's ``server.properties`` in ``bdir``; return its path."""
    config = bdir / "server.properties"
    _write_server_properties(
        config, broker_id, port, bdir / "data", zk_connect, overrides, secured, metrics
    )
    return config


def _started_entry(
    bdir: Path,
    broker_id: int,
    port: int,
    pid: int,
    overrides: Mapping[str, str],
    metrics: MetricsPort | None,
) -> dict[str, Any]:
    """A started broker's entry in ``cluster.json``."""
    return {
        "id": broker_id,
        "host": HOST,
        "port": port,
        "pid": pid,
        "log_dirs": _log_dirs_of(bdir, bdir / "data", overrides),
        "config": str(bdir / "server.properties"),
        "out": str(bdir / "broker.out"),
        "metrics_url": metrics.url if metrics is not None else None,
    }


def _cluster_info(
    directory: Path,
    nodes: list[dict[str, Any]],
    ports: list[int],
    base_port: int,
    overrides: dict[str, str],
    controller: Any,
    entries: list[dict[str, Any]],
    secured: ClusterSecurity | None,
) -> dict[str, Any]:
    """``cluster.json``'s content for a cluster just started."""
    zk_connect = zookeeper_connect(nodes)
    info: dict[str, Any] = {
        "dir": str(directory),
        "zookeeper": zk_connect,
        "zookeeper_pid": nodes[0]["pid"],
        "zk_port": nodes[0]["port"],
        "zookeeper_data_dir": nodes[0]["data_dir"],
        "zookeepers": nodes,
        "bootstrap_servers": ",".join(f"{HOST}:{p}" for p in ports),
        "base_port": base_port,
        "set": overrides,
        "cluster_id": zk_snapshot(zk_connect, [])["cluster_id"],
        "controller": controller,
        "state": "up",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "brokers": entries,
    }
    if secured is not None:
        info["security"] = secured.protocol
        info["client_config"] = secured.client_config
        info["client_properties"] = str(secured.client_properties)
    return info


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
    zk_pids = _zookeeper_pids(info)
    if zk_pids:
        say(progress, f"stopping ZooKeeper pid{'s' if len(zk_pids) > 1 else ''} {zk_pids}")
        stop_pids(zk_pids, 10, progress, "ZooKeeper")
    nodes = zookeeper_nodes(info)
    for node in nodes:
        node["pid"] = None
    if "zookeepers" in info:
        info["zookeepers"] = nodes
    info["zookeeper_pid"] = None
    info["controller"] = None
    info["state"] = "down"
    write_cluster(directory, info)
    say(progress, "cluster down")
    return info


def cluster_status(directory: Path) -> dict[str, Any]:
    """Per broker: pid alive, registered in ZooKeeper; per ZooKeeper node: pid alive and its
    mode (leader, follower, standalone, "not serving" without a quorum, "down"); whether
    the ensemble serves (a majority of nodes does); who is controller."""
    from broker.zk.client import ZkError
    from broker.zk.embedded_server import SERVING_MODES, quorum_size

    directory = Path(directory).absolute()
    info = load_cluster(directory)
    nodes = zookeeper_nodes(info)
    zk_connect = str(info.get("zookeeper") or zookeeper_connect(nodes))
    modes = _node_modes(nodes)
    need = quorum_size(len(nodes))
    serving = sum(1 for m in modes.values() if m in SERVING_MODES) >= need
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
            "metrics_url": b.get("metrics_url"),
        }
        for b in info.get("brokers", [])
    ]
    zookeepers = [
        {
            "id": n["id"],
            "host": n["host"],
            "port": n["port"],
            "peer_port": n.get("peer_port"),
            "election_port": n.get("election_port"),
            "pid": n.get("pid"),
            "alive": is_ours(n.get("pid"), ZOOKEEPER_MARKERS),
            "mode": modes[int(n["id"])] or "down",
        }
        for n in nodes
    ]
    return {
        "dir": str(directory),
        "zookeeper": zk_connect,
        "zookeeper_pid": info.get("zookeeper_pid"),
        "zookeeper_alive": any(z["alive"] for z in zookeepers),
        "zookeeper_serving": serving,
        "zookeeper_quorum": need,
        "zookeepers": zookeepers,
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
    from broker.zk.embedded_server import ensemble_serving

    directory = Path(directory).absolute()
    info = load_cluster(directory)
    entry = _broker_entry(info, broker_id)
    if is_ours(entry.get("pid"), BROKER_MARKERS):
        raise ClusterError(f"broker {broker_id} is already running (pid {entry['pid']})")
    zk_connect = str(info["zookeeper"])
    nodes = zookeeper_nodes(info)
    if not ensemble_serving([(n["host"], int(n["port"])) for n in nodes], timeout=1.0):
        if len(nodes) == 1:
            raise ClusterError(
                f"ZooKeeper at {zk_connect} is not running; start the cluster with "
                f"`millrace cluster up --dir {directory}`"
            )
        raise ClusterError(
            f"the ZooKeeper ensemble {zk_connect} does not serve (fewer than a majority of "
            f"its {len(nodes)} nodes run); start nodes with `millrace cluster start-zookeeper "
            f"--dir {directory} --node N`"
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


def _ensemble_note(nodes: list[dict[str, Any]]) -> str:
    from broker.zk.embedded_server import quorum_size

    running = sum(1 for n in nodes if is_ours(n.get("pid"), ZOOKEEPER_MARKERS))
    need = quorum_size(len(nodes))
    if running >= need:
        return f"{running} of {len(nodes)} ZooKeeper nodes running (a quorum is {need})"
    return (
        f"{running} of {len(nodes)} ZooKeeper nodes running: the ensemble has lost its "
        f"quorum of {need} and serves nothing until a majority runs again"
    )


def stop_zookeeper(
    directory: Path,
    node_id: int,
    *,
    timeout: float = DEFAULT_STOP_TIMEOUT_S,
    progress: IO[str] | None = sys.stderr,
) -> dict[str, Any]:
    """SIGTERM one ZooKeeper node (SIGKILL after ``timeout``) and wait until it is gone.
    Updates ``cluster.json`` (node 1's pid is also ``zookeeper_pid``)."""
    directory = Path(directory).absolute()
    info = load_cluster(directory)
    nodes = zookeeper_nodes(info)
    node = _node_entry(nodes, node_id)
    pid = node.get("pid")
    if isinstance(pid, int) and is_ours(pid, ZOOKEEPER_MARKERS):
        say(progress, f"stopping ZooKeeper node {node_id} (pid {pid})")
        stop_pids([pid], timeout, progress, f"ZooKeeper node {node_id}")
    else:
        say(progress, f"ZooKeeper node {node_id} is not running")
    node["pid"] = None
    _set_zookeeper_nodes(info, nodes)
    write_cluster(directory, info)
    say(progress, _ensemble_note(nodes))
    return node


def start_zookeeper(
    directory: Path,
    node_id: int,
    *,
    timeout: float = ZOOKEEPER_START_TIMEOUT_S,
    progress: IO[str] | None = sys.stderr,
) -> dict[str, Any]:
    """Start one ZooKeeper node again with its data dir. Waits until it serves when a
    majority of the nodes (this one included) then runs; otherwise (the ensemble is still
    short of a quorum) only until it answers. Updates ``cluster.json``."""
    from broker.zk.embedded_server import port_is_free, quorum_size

    directory = Path(directory).absolute()
    info = load_cluster(directory)
    nodes = zookeeper_nodes(info)
    node = _node_entry(nodes, node_id)
    if is_ours(node.get("pid"), ZOOKEEPER_MARKERS):
        raise ClusterError(f"ZooKeeper node {node_id} is already running (pid {node['pid']})")
    busy = [p for p in _node_ports([node]) if not port_is_free(str(node["host"]), p)]
    if busy:
        raise ClusterError(
            f"cannot start ZooKeeper node {node_id}: port(s) {busy} on {node['host']} "
            "already in use"
        )
    proc = _spawn_zookeeper(node, nodes, progress)
    running = sum(1 for n in nodes if is_ours(n.get("pid"), ZOOKEEPER_MARKERS))
    quorum = running >= quorum_size(len(nodes))
    try:
        modes = _wait_zookeepers([node], {node_id: proc}, 1, timeout, serving=quorum)
    except BaseException:
        with contextlib.suppress(ClusterError):
            stop_pids([proc.pid], 10, progress, f"ZooKeeper node {node_id}")
        raise
    info = load_cluster(directory)  # re-read: another command may have changed it meanwhile
    fresh = zookeeper_nodes(info)
    _node_entry(fresh, node_id)["pid"] = proc.pid
    _set_zookeeper_nodes(info, fresh)
    write_cluster(directory, info)
    say(progress, f"ZooKeeper node {node_id} is {modes[node_id] or 'starting'}")
    if not quorum:
        say(progress, _ensemble_note(fresh))
    return _node_entry(fresh, node_id)


# --------------------------------------------------------------------------- argparse


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("cluster", help="run a local cluster (ZooKeeper + brokers)")
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="start ZooKeeper and N brokers in the background")
    up.add_argument("--dir", type=Path, required=True, help="cluster directory")
    up.add_argument("--brokers", type=int, default=1, help="number of brokers (default 1)")
    up.add_argument("--base-port", type=int, default=9092, help="first broker port (9092)")
    up.add_argument(
        "--zk-port",
        type=int,
        default=2181,
        help="ZooKeeper client port (2181); node n of an ensemble uses zk-port + n - 1",
    )
    up.add_argument(
        "--zookeepers",
        type=int,
        default=1,
        metavar="N",
        help="ZooKeeper nodes: 1 (default) or an ensemble of 3 or 5, which keeps serving "
        "while a majority of its nodes runs",
    )
    up.add_argument(
        "--zk-peer-port",
        type=int,
        default=DEFAULT_ZK_PEER_PORT,
        help="ensemble: node n's quorum (follower-to-leader) port is this + n - 1 "
        "(default %(default)s)",
    )
    up.add_argument(
        "--zk-election-port",
        type=int,
        default=DEFAULT_ZK_ELECTION_PORT,
        help="ensemble: node n's leader-election port is this + n - 1 (default %(default)s)",
    )
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

    down = sub.add_parser("down", help="stop the brokers, then every ZooKeeper node")
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

    stop_zk = sub.add_parser(
        "stop-zookeeper",
        help="stop one ZooKeeper node (SIGTERM); an ensemble serves while a majority runs",
    )
    stop_zk.add_argument("--dir", type=Path, required=True)
    stop_zk.add_argument("--node", type=int, required=True, help="node id (1..N)")
    stop_zk.add_argument("--timeout", type=float, default=DEFAULT_STOP_TIMEOUT_S)
    stop_zk.set_defaults(func=_run_stop_zookeeper)

    start_zk = sub.add_parser("start-zookeeper", help="start one ZooKeeper node again")
    start_zk.add_argument("--dir", type=Path, required=True)
    start_zk.add_argument("--node", type=int, required=True, help="node id (1..N)")
    start_zk.add_argument("--timeout", type=float, default=ZOOKEEPER_START_TIMEOUT_S)
    start_zk.set_defaults(func=_run_start_zookeeper)


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
            zookeepers=args.zookeepers,
            zk_peer_port=args.zk_peer_port,
            zk_election_port=args.zk_election_port,
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
    nodes = status["zookeepers"]
    if len(nodes) == 1:
        head = [f"ZooKeeper {status['zookeeper']} (pid {status['zookeeper_pid']}): {zk}"]
    else:
        serving = sum(1 for n in nodes if n["mode"] in ("leader", "follower"))
        head = [
            f"ZooKeeper ensemble {status['zookeeper']}: {zk} ({serving} of {len(nodes)} "
            f"nodes serving, quorum {status['zookeeper_quorum']})"
        ]
        head += [
            f"  node {n['id']} {n['host']}:{n['port']} (pid {n['pid'] or '-'}): {n['mode']}"
            for n in nodes
        ]
    head += [
        f"controller: {status['controller'] if status['controller'] is not None else 'none'}",
        f"bootstrap servers: {status['bootstrap_servers']}",
    ]
    columns = (
        Column("ID", 4, align=">"),
        Column("ADDRESS", 22),
        Column("PID", 8, align=">"),
        Column("ALIVE", 6),
        Column("REGISTERED", 23),
        Column("METRICS"),
    )
    rows = [
        (
            b["id"],
            f"{b['host']}:{b['port']}",
            b["pid"] or "-",
            "yes" if b["alive"] else "no",
            {True: "yes", False: "no", None: "unknown"}[b["registered"]]
            + (" (controller)" if b["id"] == status["controller"] else ""),
            b.get("metrics_url") or "-",
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


def _run_stop_zookeeper(args: argparse.Namespace) -> int:
    try:
        stop_zookeeper(args.dir, args.node, timeout=args.timeout)
    except (ClusterError, OSError) as exc:
        return _fail(exc)
    return 0


def _run_start_zookeeper(args: argparse.Namespace) -> int:
    try:
        start_zookeeper(args.dir, args.node, timeout=args.timeout)
    except (ClusterError, OSError) as exc:
        return _fail(exc)
    return 0
