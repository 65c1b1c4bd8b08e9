"""Helpers the benchmarks share: starting a Millrace cluster with ``millrace cluster up``, a
confluent-kafka produce phase with the broker's CPU time, the machine's description, and
writing one section of ``BENCHMARKS.md`` while keeping the others. The 100-byte record and
the progress line are ``bench.basics`` (a leaf: ``bench.loadgen`` needs them too, and this
module imports ``bench.loadgen``).

Not a benchmark itself: ``python -m bench.compare`` (Millrace beside Apache Kafka),
``python -m bench.cluster`` and ``python -m bench.groups`` are.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import loadgen
from bench.basics import RECORD
from bench.procstat import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Phase:
    records: int
    seconds: float
    broker_cpu_s: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.records * len(RECORD) / self.seconds / 1e6

    @property
    def cpu_share(self) -> float:
        return self.broker_cpu_s / self.seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def millrace(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *args],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_cluster(
    cluster_dir: Path,
    brokers: int = 1,
    settings: dict[str, str] | None = None,
    ssl_port: int | None = None,
) -> str:
    """``millrace cluster up`` with ``brokers`` brokers on consecutive free ports and the
    broker ``settings``; returns the bootstrap servers. ``ssl_port`` (one broker only): a
    second listener, SSL, on that port (the TLS settings come in ``settings``)."""
    base = free_port()
    while not all(_port_free(base + i) for i in range(1, brokers)):
        base = free_port()
    settings = dict(settings or {})
    if ssl_port is not None:
        assert brokers == 1, "a second listener is set up for one broker only"
        settings["listeners"] = f"PLAINTEXT://127.0.0.1:{base},SSL://127.0.0.1:{ssl_port}"
        settings["inter.broker.listener.name"] = "PLAINTEXT"
    sets = [arg for k, v in settings.items() for arg in ("--set", f"{k}={v}")]
    out = millrace(
        "cluster",
        "up",
        "--dir",
        str(cluster_dir),
        "--brokers",
        str(brokers),
        "--base-port",
        str(base),
        "--zk-port",
        str(free_port()),
        *sets,
    )
    return out.strip().splitlines()[-1]


def produce(
    bootstrap: str,
    topic: str,
    n: int,
    pids: list[int],
    extra: dict[str, object] | None = None,
) -> Phase:
    """``n`` records of RECORD into partition 0 with the load generator (linger.ms=5, acks=1
    unless ``extra`` says otherwise); broker CPU summed over ``pids``."""
    cpu0 = sum(cpu_seconds(pid) for pid in pids)
    result = loadgen.produce(bootstrap, topic, n, dict(extra or {}))
    return Phase(n, result.seconds, sum(cpu_seconds(pid) for pid in pids) - cpu0)


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return (
        f"{model}, {os.cpu_count()} cores, {mem_kb / 2**20:.0f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()


def commit() -> str:
    """The short commit of the working tree (``+`` when it has uncommitted changes), or "?"."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except OSError:
        return "?"
    return (head or "?") + ("+" if dirty else "")


def replace_section(out: Path, heading: str, section: str) -> None:
    """Write ``section`` (starting with ``heading``) into the report ``out``, replacing the
    section of that heading if present, keeping every other section."""
    existing = out.read_text() if out.exists() else "# Benchmarks\n"
    if heading in existing:
        before, _, rest = existing.partition(heading)
        after = rest.split("\n## ", 1)
        existing = before + section + (("\n## " + after[1]) if len(after) > 1 else "")
    else:
        existing = existing.rstrip("\n") + "\n\n" + section
    out.write_text(existing)
