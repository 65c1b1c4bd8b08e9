"""``millrace cluster up|down|status|stop-broker|start-broker``: a local cluster in a directory.

Layout of the cluster directory ``D`` (DESIGN.md section 3)::

    D/cluster.json                 what is running: pids, ports, bootstrap servers
    D/zookeeper/                   ZooKeeper's data dir (zoo.cfg, version-2/, zookeeper.log)
    D/zookeeper/zookeeper.out      stdout/stderr of `millrace zookeeper start`
    D/broker-<id>/server.properties
    D/broker-<id>/data/            the broker's log.dirs
    D/broker-<id>/broker.out       stdout/stderr of `millrace broker start` (appended)

Every process is started with ``sys.executable -m broker.cli.main ...`` in a session of its
own (``start_new_session``), so it outlives the command that started it and a Ctrl-C in the
terminal does not reach it. ``millrace zookeeper start`` execs the JVM, so
``zookeeper_pid`` is ZooKeeper itself. Processes are stopped by the pids recorded in
``cluster.json``; before signalling a pid its command line is checked (on Linux) so a pid
reused by an unrelated process is never signalled.

"Registered" means a ``/brokers/ids/<id>`` znode created after the broker was started: the
broker epoch (the znode's czxid) is compared with the one seen before the start, so a stale
znode of a hard-killed predecessor (alive until its session times out) is not mistaken for
the new broker.

The functions (``cluster_up``, ``cluster_down``, ``cluster_status``, ``stop_broker``,
``start_broker``) are importable by tests; they write progress lines to ``progress`` (stderr by
default) and raise :class:`ClusterError` with a clear message (and the tail of the failing
process's output) on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

HOST = "127.0.0.1"
CLUSTER_FILE = "cluster.json"
DEFAULT_UP_TIMEOUT_S = 120.0
DEFAULT_STOP_TIMEOUT_S = 30.0
ZOOKEEPER_START_TIMEOUT_S = 60.0
BROKER_LOG_LEVEL = "INFO"

# Popen objects of the processes this Python process started (so we can reap them).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ClusterError(RuntimeError):
    """A cluster command failed; the message says why (and shows the relevant output)."""


# --------------------------------------------------------------------------- small helpers


def _say(progress: IO[str] | None, text: str) -> None:
    if progress is not None:
        progress.write(f"millrace cluster: {text}\n")
        progress.flush()


def _tail(path: Path, lines: int = 40) -> str:
    from broker.zookeeper import tail

    text = tail(path, lines)
    return text if text else f"({path} is empty or missing)"


def _repo_root() -> Path:
    import broker

    return Path(broker.__file__).resolve().parent.parent


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(_repo_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _cmdline(pid: int) -> str | None:
    """The process's command line (Linux), or None if unknown."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace")


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` runs (not a zombie). Reaps it if it is our dead child."""
    if not pid or pid <= 0:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        _CHILDREN.pop(pid, None)
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False  # our child, now reaped
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _is_ours(pid: int | None, markers: Sequence[str]) -> bool:
    """Alive, and (where /proc tells) its command line mentions one of ``markers``."""
    if not pid_alive(pid):
        return False
    assert pid is not None
    cmdline = _cmdline(pid)
    return cmdline is None or any(m in cmdline for m in markers)


BROKER_MARKERS = ("broker.cli.main",)
ZOOKEEPER_MARKERS = ("ZooKeeperServerMain", "broker.cli.main")


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Wait until every pid is gone; return the ones still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if pid_alive(p)]
    return alive


def _stop_pids(
    pids: Sequence[int], timeout: float, progress: IO[str] | None, what: str, hard: bool = False
) -> None:
    """SIGTERM (or SIGKILL if ``hard``), wait up to ``timeout``, SIGKILL stragglers, wait."""
    if not pids:
        return
    for pid in pids:
        _signal(pid, signal.SIGKILL if hard else signal.SIGTERM)
    left = _wait_gone(pids, timeout)
    if left:
        _say(progress, f"{what} pid(s) {left} still alive after {timeout:g}s; sending SIGKILL")
        for pid in left:
            _signal(pid, signal.SIGKILL)
        still = _wait_gone(left, 10)
        if still:
            raise ClusterError(f"{what} pid(s) {still} survived SIGKILL")
    for pid in pids:
        _CHILDREN.pop(pid, None)


def _spawn(cmd: list[str], out_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=_child_env(),
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc


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


def broker_command(config_path: Path, log_level: str = BROKER_LOG_LEVEL) -> list[str]:
    """The command line that runs one broker of a cluster."""
    return [
        sys.executable,
        "-m",
        "broker.cli.main",
        "--log-level",
        log_level,
        "broker",
        "start",
        "--config",
        str(config_path),
    ]


# ZooKeeper expires sessions on tick boundaries: with a 500 ms tick a dead broker's session
# ends within half a second of zookeeper.session.timeout.ms (ZooKeeper's default 2-3 s tick
# adds up to a whole tick), which is what bounds failover after a hard kill.
CLUSTER_ZK_TICK_MS = 500


def zookeeper_command(port: int, data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "broker.cli.main",
        "zookeeper",
        "start",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--host",
        HOST,
        "--tick-time",
        str(CLUSTER_ZK_TICK_MS),
    ]


def _write_server_properties(
    path: Path,
    broker_id: int,
    port: int,
    data_dir: Path,
    zk_connect: str,
    overrides: Mapping[str, str],
) -> None:
    base = {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://{HOST}:{port}",
        "log.dirs": str(data_dir),
        "zookeeper.connect": zk_connect,
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
    path.write_text("\n".join(lines) + "\n")


def _validate_overrides(overrides: Mapping[str, str], zk_connect: str) -> None:
    from broker.config import BrokerConfig, ConfigError

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


# --------------------------------------------------------------------------- ZooKeeper queries


async def _zk_snapshot(zk_connect: str, broker_ids: Sequence[int]) -> dict[str, Any]:
    """Registration epochs of ``broker_ids``, the controller and the cluster id."""
    from broker.controller.zk_client import ZkClient

    client = ZkClient(zk_connect, session_timeout_ms=10_000, connection_timeout_ms=5_000)
    await client.start()
    try:
        epochs = {b: await client.get_broker_epoch(b) for b in broker_ids}
        controller = await client.get_controller()
        cluster_id = await client.get_cluster_id()
        return {"epochs": epochs, "controller": controller, "cluster_id": cluster_id}
    finally:
        await client.close()


def _zk_snapshot_sync(zk_connect: str, broker_ids: Sequence[int]) -> dict[str, Any]:
    return asyncio.run(_zk_snapshot(zk_connect, broker_ids))


def _wait_unregistered(
    zk_connect: str, broker_ids: Sequence[int], timeout: float, progress: IO[str] | None
) -> None:
    """Wait until no ``/brokers/ids/<id>`` of ``broker_ids`` exists: a hard-killed broker's
    ephemeral znode lives until its session times out, and a new broker with that id
    cannot register before."""
    deadline = time.monotonic() + timeout
    announced: list[int] = []
    while True:
        left = [b for b, e in _zk_snapshot_sync(zk_connect, broker_ids)["epochs"].items() if e]
        if not left:
            return
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"broker(s) {left} are still registered in ZooKeeper after {timeout:g}s; "
                "is another broker with that id running?"
            )
        if left != announced:
            announced = left
            _say(
                progress,
                f"waiting for the stale registration of broker(s) {left} to expire (a killed "
                "broker's ZooKeeper session times out after zookeeper.session.timeout.ms)",
            )
        time.sleep(0.5)


def _wait_registered(
    zk_connect: str,
    procs: Mapping[int, subprocess.Popen[bytes] | int],
    stale: Mapping[int, int | None],
    out_files: Mapping[int, Path],
    timeout: float,
    progress: IO[str] | None,
    need_controller: bool = True,
) -> dict[str, Any]:
    """Until every broker in ``procs`` has a fresh registration (and a controller exists)."""
    from broker.controller.zk_client import ZkClient

    async def run() -> dict[str, Any]:
        client = ZkClient(zk_connect, session_timeout_ms=10_000, connection_timeout_ms=10_000)
        await client.start()
        try:
            deadline = time.monotonic() + timeout
            last_count = -1
            while True:
                for broker_id, proc in procs.items():
                    pid = proc.pid if isinstance(proc, subprocess.Popen) else proc
                    if not pid_alive(pid):
                        code = proc.poll() if isinstance(proc, subprocess.Popen) else None
                        raise ClusterError(
                            f"broker {broker_id} (pid {pid}) exited"
                            f"{f' with code {code}' if code is not None else ''} before "
                            f"registering in ZooKeeper. Last lines of {out_files[broker_id]}:\n"
                            f"{_tail(out_files[broker_id])}"
                        )
                fresh = []
                for broker_id in procs:
                    epoch = await client.get_broker_epoch(broker_id)
                    if epoch is not None and epoch != stale.get(broker_id):
                        fresh.append(broker_id)
                controller = await client.get_controller()
                if len(fresh) != last_count:
                    last_count = len(fresh)
                    _say(progress, f"{len(fresh)}/{len(procs)} broker(s) registered")
                controller_ok = not need_controller or (
                    controller is not None and (controller in fresh or controller not in procs)
                )
                if len(fresh) == len(procs) and controller_ok:
                    return {"controller": controller}
                if time.monotonic() >= deadline:
                    missing = sorted(set(procs) - set(fresh))
                    tails = "\n".join(
                        f"--- broker {b}: last lines of {out_files[b]} ---\n{_tail(out_files[b])}"
                        for b in (missing or list(procs))
                    )
                    what = (
                        f"broker(s) {missing} did not register"
                        if missing
                        else "no controller was elected"
                    )
                    raise ClusterError(f"{what} within {timeout:g}s.\n{tails}")
                await asyncio.sleep(0.2)
        finally:
            await client.close()

    return asyncio.run(run())


# --------------------------------------------------------------------------- commands


def _start_zookeeper(
    directory: Path, zk_port: int, progress: IO[str] | None
) -> subprocess.Popen[bytes]:
    from broker.zookeeper import zookeeper_is_serving

    zk_dir = directory / "zookeeper"
    zk_dir.mkdir(parents=True, exist_ok=True)
    out = zk_dir / "zookeeper.out"
    _say(progress, f"starting ZooKeeper on {HOST}:{zk_port}")
    proc = _spawn(zookeeper_command(zk_port, zk_dir), out, zk_dir)
    deadline = time.monotonic() + ZOOKEEPER_START_TIMEOUT_S
    while not zookeeper_is_serving(HOST, zk_port, timeout=1.0):
        code = proc.poll()
        if code is not None:
            _CHILDREN.pop(proc.pid, None)
            raise ClusterError(
                f"ZooKeeper exited with code {code}. Last lines of {out}:\n{_tail(out)}\n"
                f"--- {zk_dir / 'zookeeper.log'} ---\n{_tail(zk_dir / 'zookeeper.log')}"
            )
        if time.monotonic() >= deadline:
            _stop_pids([proc.pid], 10, progress, "ZooKeeper")
            raise ClusterError(
                f"ZooKeeper did not answer on {HOST}:{zk_port} within "
                f"{ZOOKEEPER_START_TIMEOUT_S:g}s. Last lines of {out}:\n{_tail(out)}\n"
                f"--- {zk_dir / 'zookeeper.log'} ---\n{_tail(zk_dir / 'zookeeper.log')}"
            )
        time.sleep(0.1)
    _say(progress, f"ZooKeeper ready (pid {proc.pid})")
    return proc


def _running_pids(info: Mapping[str, Any]) -> list[int]:
    pids = [b.get("pid") for b in info.get("brokers", []) if _is_ours(b.get("pid"), BROKER_MARKERS)]
    if _is_ours(info.get("zookeeper_pid"), ZOOKEEPER_MARKERS):
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
) -> dict[str, Any]:
    """Start ZooKeeper and ``brokers`` brokers (ids 1..N on ``base_port``..), wait until all
    are registered and a controller is elected, write and return ``cluster.json``'s content.
    On failure everything started is stopped and :class:`ClusterError` raised."""
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

    started: list[int] = []
    zk_proc: subprocess.Popen[bytes] | None = None
    try:
        zk_proc = _start_zookeeper(directory, zk_port, progress)
        ids = list(range(1, brokers + 1))
        if ids:
            _wait_unregistered(zk_connect, ids, timeout, progress)
        stale: dict[int, int | None] = {}
        procs: dict[int, subprocess.Popen[bytes]] = {}
        out_files: dict[int, Path] = {}
        entries: list[dict[str, Any]] = []
        for broker_id, port in zip(ids, ports, strict=True):
            bdir = directory / f"broker-{broker_id}"
            data_dir = bdir / "data"
            config = bdir / "server.properties"
            _write_server_properties(config, broker_id, port, data_dir, zk_connect, overrides)
            out_files[broker_id] = bdir / "broker.out"
            proc = _spawn(broker_command(config), out_files[broker_id], bdir)
            started.append(proc.pid)
            procs[broker_id] = proc
            _say(progress, f"started broker {broker_id} on {HOST}:{port} (pid {proc.pid})")
            entries.append(
                {
                    "id": broker_id,
                    "host": HOST,
                    "port": port,
                    "pid": proc.pid,
                    "log_dirs": [str(data_dir)],
                    "config": str(config),
                    "out": str(out_files[broker_id]),
                }
            )
        controller = None
        if procs:
            controller = _wait_registered(zk_connect, procs, stale, out_files, timeout, progress)[
                "controller"
            ]
            _say(progress, f"all {len(procs)} broker(s) registered; controller is {controller}")
        cluster_id = _zk_snapshot_sync(zk_connect, [])["cluster_id"]
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
        write_cluster(directory, info)
        return info
    except BaseException:
        with contextlib.suppress(ClusterError):
            _stop_pids(started, DEFAULT_STOP_TIMEOUT_S, progress, "broker")
        if zk_proc is not None:
            with contextlib.suppress(ClusterError):
                _stop_pids([zk_proc.pid], 10, progress, "ZooKeeper")
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
        _say(progress, f"nothing to stop: {exc}")
        return {}
    broker_pids = [
        b["pid"] for b in info.get("brokers", []) if _is_ours(b.get("pid"), BROKER_MARKERS)
    ]
    if broker_pids:
        _say(progress, f"stopping broker pid(s) {broker_pids}")
    _stop_pids(broker_pids, timeout, progress, "broker")
    for entry in info.get("brokers", []):
        entry["pid"] = None
    zk_pid = info.get("zookeeper_pid")
    if isinstance(zk_pid, int) and _is_ours(zk_pid, ZOOKEEPER_MARKERS):
        _say(progress, f"stopping ZooKeeper pid {zk_pid}")
        _stop_pids([zk_pid], 10, progress, "ZooKeeper")
    info["zookeeper_pid"] = None
    info["controller"] = None
    info["state"] = "down"
    write_cluster(directory, info)
    _say(progress, "cluster down")
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
            snapshot = _zk_snapshot_sync(zk_connect, ids)
    brokers = [
        {
            "id": b["id"],
            "host": b.get("host"),
            "port": b.get("port"),
            "pid": b.get("pid"),
            "alive": _is_ours(b.get("pid"), BROKER_MARKERS),
            "registered": snapshot["epochs"].get(int(b["id"])) is not None if serving else None,
            "broker_epoch": snapshot["epochs"].get(int(b["id"])),
        }
        for b in info.get("brokers", [])
    ]
    return {
        "dir": str(directory),
        "zookeeper": zk_connect,
        "zookeeper_pid": info.get("zookeeper_pid"),
        "zookeeper_alive": _is_ours(info.get("zookeeper_pid"), ZOOKEEPER_MARKERS),
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
    if isinstance(pid, int) and _is_ours(pid, BROKER_MARKERS):
        _say(progress, f"{'killing' if hard else 'stopping'} broker {broker_id} (pid {pid})")
        _stop_pids([pid], timeout, progress, f"broker {broker_id}", hard=hard)
    else:
        _say(progress, f"broker {broker_id} is not running")
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
    (after a hard kill, until the old session expired and the broker re-registered).
    Updates the pid in ``cluster.json``."""
    from broker.zookeeper import zookeeper_is_serving

    directory = Path(directory).absolute()
    info = load_cluster(directory)
    entry = _broker_entry(info, broker_id)
    if _is_ours(entry.get("pid"), BROKER_MARKERS):
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
    _wait_unregistered(zk_connect, [broker_id], timeout, progress)
    stale: dict[int, int | None] = {}
    proc = _spawn(broker_command(config), out, bdir)
    _say(progress, f"started broker {broker_id} (pid {proc.pid}); waiting for registration")
    try:
        _wait_registered(
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
            _stop_pids([proc.pid], DEFAULT_STOP_TIMEOUT_S, progress, f"broker {broker_id}")
        raise
    entry["pid"] = proc.pid
    info = load_cluster(directory)  # re-read: another command may have changed it meanwhile
    _replace_broker(info, entry)
    info["state"] = "up"
    write_cluster(directory, info)
    _say(progress, f"broker {broker_id} registered")
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
    sys.stderr.write(f"millrace cluster: error: {exc}\n")
    return 1


def _run_up(args: argparse.Namespace) -> int:
    from broker.config import ConfigError, parse_set_options

    try:
        overrides = parse_set_options(args.set)
        info = cluster_up(
            args.dir, args.brokers, args.base_port, args.zk_port, overrides, timeout=args.timeout
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
    out = [
        f"ZooKeeper {status['zookeeper']} (pid {status['zookeeper_pid']}): {zk}",
        f"controller: {status['controller'] if status['controller'] is not None else 'none'}",
        f"bootstrap servers: {status['bootstrap_servers']}",
        f"{'ID':>4} {'ADDRESS':<22} {'PID':>8} {'ALIVE':<6} REGISTERED",
    ]
    for b in status["brokers"]:
        registered = {True: "yes", False: "no", None: "unknown"}[b["registered"]]
        mark = " (controller)" if b["id"] == status["controller"] else ""
        address = f"{b['host']}:{b['port']}"
        out.append(
            f"{b['id']:>4} {address:<22} {b['pid'] or '-'!s:>8} "
            f"{'yes' if b['alive'] else 'no':<6} {registered}{mark}"
        )
    sys.stdout.write("\n".join(out) + "\n")
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
