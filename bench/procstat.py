"""CPU seconds and peak resident memory of broker processes, read from ``/proc``.

* CPU: ``utime + stime`` of ``/proc/<pid>/stat`` (all threads, so a JVM's GC and network
  threads count as much as a Python broker's asyncio loop), in seconds.
  :func:`tree_cpu_seconds` adds the process's descendants (live ones, and the waited-for
  ones through ``cutime + cstime``): Millrace's log cleaner runs in worker processes.
* Peak RSS: ``VmHWM`` of ``/proc/<pid>/status``. Writing ``5`` to ``/proc/<pid>/clear_refs``
  resets the high-water mark to the current RSS, so a :class:`Meter` started before a
  workload reports the peak reached *during* that workload (not since the process started).

A :class:`Meter` is used from one thread: ``start()`` before the workload, ``stop()`` after.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process in ``/proc``."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry))[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and of all its descendants: each live process's ``utime +
    stime`` plus ``cutime + cstime`` (its children already waited for), so a worker that
    exits between two readings still counts, once."""
    tree = _children()
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            f = _stat_fields(p)
        except OSError:
            continue  # exited: its time is in its parent's cutime once waited for
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        todo.extend(tree.get(p, ()))
    return total / CLK_TCK


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


def peak_rss_mib(pid: int) -> float:
    return _status_kib(pid, "VmHWM") / 1024


def reset_peak_rss(pid: int) -> bool:
    """Reset ``VmHWM`` to the current RSS; False where the kernel refuses (then the peak is
    the peak since the process started)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Usage:
    """Broker resources over one workload: CPU seconds summed over the brokers, the largest
    single broker's peak RSS (MiB), and wall seconds."""

    cpu_s: float
    peak_rss_mib: float
    seconds: float

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.seconds if self.seconds else 0.0


class Meter:
    """CPU and peak RSS of ``pids`` between ``start()`` and ``stop()``."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = list(pids)
        self._cpu0 = 0.0
        self._t0 = 0.0

    def start(self) -> Meter:
        import time

        for pid in self.pids:
            reset_peak_rss(pid)
        self._cpu0 = sum(cpu_seconds(pid) for pid in self.pids)
        self._t0 = time.perf_counter()
        return self

    def stop(self) -> Usage:
        import time

        seconds = time.perf_counter() - self._t0
        cpu = sum(cpu_seconds(pid) for pid in self.pids) - self._cpu0
        peak = max((peak_rss_mib(pid) for pid in self.pids), default=0.0)
        return Usage(cpu_s=cpu, peak_rss_mib=peak, seconds=seconds)
