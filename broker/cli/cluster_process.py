"""Process management of ``millrace cluster``: the command lines of a cluster's ZooKeeper
and brokers, starting them in the background, telling whether a recorded pid is still one of
ours, and stopping them.

Every process is started with ``sys.executable -m broker.cli.main ...`` in a session of its
own (``start_new_session``), so it outlives the command that started it and a Ctrl-C in the
terminal does not reach it; its stdout and stderr are appended to a file. ``millrace
zookeeper start`` execs the JVM, so the ZooKeeper pid is ZooKeeper itself. Before a pid is
signalled its command line is checked (on Linux, ``/proc/<pid>/cmdline``) so a pid reused by
an unrelated process is never signalled. The children this Python process started are kept
(``_CHILDREN``) so they are reaped, not left as zombies.

Synchronous, for the command's one thread; failures raise :class:`ClusterError`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

HOST = "127.0.0.1"
BROKER_LOG_LEVEL = "INFO"
BROKER_MARKERS = ("broker.cli.main",)
ZOOKEEPER_MARKERS = ("ZooKeeperServerMain", "QuorumPeerMain", "broker.cli.main")

# Popen objects of the processes this Python process started (so we can reap them).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ClusterError(RuntimeError):
    """A cluster command failed; the message says why (and shows the relevant output)."""


def say(progress: IO[str] | None, text: str) -> None:
    """A progress line ``millrace cluster: <text>`` on ``progress`` (None: silent)."""
    if progress is not None:
        progress.write(f"millrace cluster: {text}\n")
        progress.flush()


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a process's output file, for an error message."""
    from broker.zk.embedded_server import tail as tail_of

    text = tail_of(path, lines)
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
    ours = _child_alive(pid)
    if ours is not None:
        return ours
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _child_alive(pid: int) -> bool | None:
    """Whether our child ``pid`` runs (a dead one reaped); None if it is not our child, or
    still runs as one we did not start here."""
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
    return None


def _is_zombie(pid: int) -> bool:
    """True if /proc shows ``pid`` a zombie or dead (no /proc: False, trusting kill(0))."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def is_ours(pid: int | None, markers: Sequence[str]) -> bool:
    """Alive, and (where /proc tells) its command line mentions one of ``markers``."""
    if not pid_alive(pid):
        return False
    assert pid is not None
    cmdline = _cmdline(pid)
    return cmdline is None or any(m in cmdline for m in markers)


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


def stop_pids(
    pids: Sequence[int], timeout: float, progress: IO[str] | None, what: str, hard: bool = False
) -> None:
    """SIGTERM (or SIGKILL if ``hard``), wait up to ``timeout``, SIGKILL stragglers, wait."""
    if not pids:
        return
    for pid in pids:
        _signal(pid, signal.SIGKILL if hard else signal.SIGTERM)
    left = _wait_gone(pids, timeout)
    if left:
        say(progress, f"{what} pid(s) {left} still alive after {timeout:g}s; sending SIGKILL")
        for pid in left:
            _signal(pid, signal.SIGKILL)
        still = _wait_gone(left, 10)
        if still:
            raise ClusterError(f"{what} pid(s) {still} survived SIGKILL")
    for pid in pids:
        _CHILDREN.pop(pid, None)


def spawn(cmd: list[str], out_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in ``cwd`` in a session of its own, stdin from /dev/null, stdout and
    stderr appended to ``out_path`` (after a line naming the command)."""
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


def forget(pid: int) -> None:
    """Stop tracking a child that exited (its Popen was polled)."""
    _CHILDREN.pop(pid, None)


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
# An ensemble member's initLimit / syncLimit in ticks (10 s / 5 s at 500 ms): generous, for
# a loaded machine running every member and the brokers at once. A member whose leader dies
# notices at once (the connection closes) and elects a new one within a second or two.
CLUSTER_ZK_INIT_LIMIT = 20
CLUSTER_ZK_SYNC_LIMIT = 10


def zookeeper_command(
    port: int,
    data_dir: Path,
    *,
    server_id: int | None = None,
    servers: Sequence[str] = (),
) -> list[str]:
    """The command line that runs a cluster's ZooKeeper: standalone, or (``server_id`` and
    ``servers``, each ``N=host:peer:election``) one member of its ensemble."""
    cmd = [
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
    if servers:
        cmd += [
            "--id",
            str(server_id),
            "--init-limit",
            str(CLUSTER_ZK_INIT_LIMIT),
            "--sync-limit",
            str(CLUSTER_ZK_SYNC_LIMIT),
        ]
        for spec in servers:
            cmd += ["--server", spec]
    return cmd
