"""Real ``spark-submit`` runs of the jobs in ``jobs/``, as child processes a test controls:
started in a process group of their own, frozen (SIGSTOP) to look at a consistent state,
SIGKILLed mid-run, and always stopped by their own pids at teardown.

Process layout of a local-mode ``spark-submit`` of a Python job (``spark-submit`` execs the
JVM, so the pid :class:`SparkSubmit` starts is the driver JVM, leader of its group): the
Python driver (the job's ``main``) and the streaming source runner are children of the JVM in
its group; each ``pyspark.daemon`` (one per worker module: ``pyspark.worker`` runs tasks,
``pyspark.sql.worker.*`` plans Python data sources for the driver) calls ``setpgid(0, 0)``,
so it and the workers it forks live in groups of their own. :meth:`SparkSubmit.kill` therefore
kills the JVM's group and then every descendant it has seen, each by its pid (checked against
the process's start time, so a recycled pid is never hit).

The job imports this checkout's packages: ``PYTHONPATH`` puts the checkout first, for the
driver and the workers (an editable install of another checkout would otherwise win).

Concurrency: one pytest thread drives a :class:`SparkSubmit`.
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

from broker.cli.demo.spark_jobs import task_workers
from tests.harness.processes import pid_alive

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "jobs"
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    # Delta computes a table's snapshot with 50 shuffle partitions by default: seconds per
    # micro-batch on two cores
    "spark.databricks.delta.snapshotPartitions": "1",
    # C1 only: a short local job on two cores spends much of its time in the C2 compiler
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state) of ``pid``; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19]), fields[0]


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of ``root`` (not ``root`` itself): pid -> start time."""
    stats: dict[int, tuple[int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                stats[int(entry)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _start, _state) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, int] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = stats[pid][1]
            todo += children.get(pid, [])
    return out


class SparkSubmit:
    """``spark-submit jobs/<script> <job_args>`` in local mode (``local[2,4]`` by default: a
    failed task is retried, as on a cluster), output to ``log_path``, with ``env`` added to
    the environment."""

    def __init__(
        self,
        script: str,
        job_args: Sequence[str],
        log_path: Path,
        *,
        submit_args: Sequence[str] = (),
        master: str = "local[2,4]",
        conf: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.script = script
        self.env = dict(env or {})
        self.job_args = list(job_args)
        self.log_path = log_path
        self.submit_args = list(submit_args)
        self.master = master
        self.conf = {**DEFAULT_CONF, **(conf or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: dict[int, int] = {}  # every process of the run seen so far: pid -> start
        self.killed = False

    def command(self) -> list[str]:
        submit = Path(sys.executable).with_name("spark-submit")
        cmd = [str(submit) if submit.exists() else "spark-submit", "--master", self.master]
        for key, value in self.conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, *self.submit_args, str(JOBS / self.script), *self.job_args]

    def start(self) -> SparkSubmit:
        env = dict(
            os.environ,
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            **self.env,
        )
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.log_path.parent,
                start_new_session=True,
            )
        st = _stat(self.proc.pid)
        if st is not None:
            self.seen[self.proc.pid] = st[1]
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def track(self) -> dict[int, int]:
        """Remember the run's processes (for :meth:`kill`); returns the live descendants."""
        found = descendants(self.pid) if self.running() else {}
        self.seen.update(found)
        return found

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None, "not started"
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"spark-submit {self.script} still running after {timeout_s:g}s; its output "
                f"ends with:\n{self.output()[-4000:]}"
            ) from None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def freeze(self, timeout_s: float = 5.0) -> bool:
        """SIGSTOP the JVM's process group (the JVM and the Python driver): no commit of any
        kind can happen until :meth:`thaw`. Returns once each of its processes is stopped
        (False when the run had already ended)."""
        if not self.running():
            return False
        self.track()
        self._signal_group(signal.SIGSTOP)
        members = [self.pid] + [p for p in descendants(self.pid) if _pgid(p) == self.pid]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = [_stat(p) for p in members]
            if all(st is None or st[2] in ("T", "t", "Z", "X") for st in states):
                return self.running()
            time.sleep(0.005)
        raise AssertionError(f"spark-submit {self.script}: group {self.pid} did not stop")

    def thaw(self) -> None:
        self._signal_group(signal.SIGCONT)

    def kill_workers(self) -> list[int]:
        """SIGKILL the executor side's Python workers (:func:`task_workers`); returns them."""
        workers = task_workers(self.pid) if self.running() else []
        for pid in workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return workers

    def kill(self) -> None:
        """SIGKILL the whole run: the JVM's group, then every process of the run seen (the
        daemons and workers live in groups of their own), each by its pid. Idempotent; never
        raises."""
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            self.track()
        if self.running():
            self.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        for pid, start in sorted(self.seen.items()):
            st = _stat(pid)
            if st is not None and st[1] == start:  # the same process, not a recycled pid
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            pid_alive(pid) and (_stat(pid) or (0, -1, ""))[1] == start
            for pid, start in self.seen.items()
        ):
            time.sleep(0.05)


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1
