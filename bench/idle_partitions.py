"""The idle cost of many partitions, Millrace beside Apache Kafka.

Three brokers each (Kafka on Millrace's ZooKeeper, as in ``bench.compare``), one topic of
``--partitions`` partitions (3,000 by default) with RF=3 created on each system; then no
traffic at all. Measured per system:

* **create s**: CreateTopics until every partition has a leader in Metadata and a full ISR
  (all 3 replicas), as the admin client sees it;
* **idle CPU, % of a core per broker**: the brokers' CPU seconds (``/proc``, all threads)
  over ``--seconds`` of idleness, after ``--settle`` seconds for the followers to reach the
  leaders' ends and any post-creation work to finish, divided by the brokers and the time;
* **RSS MiB per broker**: the largest broker's resident memory at the end.

The systems run one after the other (not at the same time), so each has the machine to itself.
``--profile`` writes a py-spy profile (``--profile-seconds``) of one idle Millrace broker to
``benchmarks/idle-profile.txt``.

Writes the section "Idle partitions beside Apache Kafka" of ``BENCHMARKS.md``.

Usage: ``python -m bench.idle_partitions [--partitions N] [--seconds S] [--runs N]``.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, machine, replace_section
from bench.compare import log
from bench.procstat import cpu_seconds, tree_cpu_seconds
from bench.systems import KAFKA_VERSION, KafkaSystem, MillraceSystem, System

HEADING = "## Idle partitions beside Apache Kafka"
PROFILE = ROOT / "benchmarks" / "idle-profile.txt"


@dataclass(slots=True)
class Sample:
    system: str
    create_s: float
    cpu_share: float  # of one core, per broker
    rss_mib: float  # largest broker


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_full_isr(system: System, topic: str, partitions: int, timeout_s: float) -> None:
    admin = system.admin()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=30).topics.get(topic)
        if (
            t is not None
            and len(t.partitions) == partitions
            and all(len(p.isrs) == 3 and p.leader >= 0 for p in t.partitions.values())
        ):
            return
        time.sleep(0.5)
    raise SystemExit(f"{system.name}: {topic} has no full ISR after {timeout_s:g}s")


def measure(system: System, args: argparse.Namespace, profile: bool) -> Sample:
    topic = "idle"
    t0 = time.monotonic()
    system.create_topic(topic, args.partitions, 3, timeout_s=600)
    wait_full_isr(system, topic, args.partitions, 600)
    create_s = time.monotonic() - t0
    log(f"[idle] {system.name}: {args.partitions:,} partitions, full ISR in {create_s:.1f}s")
    time.sleep(args.settle)
    tree = tree_cpu_seconds if system.name == "Millrace" else cpu_seconds
    c0 = sum(tree(p) for p in system.pids)
    w0 = time.monotonic()
    time.sleep(args.seconds)
    cpu = sum(tree(p) for p in system.pids) - c0
    wall = time.monotonic() - w0
    share = cpu / wall / len(system.pids)
    rss = max(rss_mib(p) for p in system.pids)
    log(f"[idle] {system.name}: {share * 100:.1f}% of a core per broker, RSS {rss:.0f} MiB")
    if profile and system.name == "Millrace":
        write_profile(system.pids[0], args.profile_seconds)
    return Sample(system.name, create_s, share, rss)


def write_profile(pid: int, seconds: int) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = subprocess.run(
        [
            py_spy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(seconds),
            "--format",
            "raw",
            "--output",
            "/dev/stdout",
            "--nonblocking",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    stacks: dict[str, int] = {}
    total = 0
    leaves: dict[str, int] = {}
    for line in out.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or line.startswith("py-spy>"):
            continue
        total += int(count)
        frames = stack.split(";")
        for frame in set(frames):
            stacks[frame] = stacks.get(frame, 0) + int(count)
        leaves[frames[-1]] = leaves.get(frames[-1], 0) + int(count)

    def top(counts: dict[str, int], n: int) -> str:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
        return "\n".join(f"{c / max(total, 1) * 100:5.1f}%  {frame}" for frame, c in best)

    PROFILE.write_text(
        f"py-spy, one idle Millrace broker, {seconds}s, {total} samples (100 a second while "
        "it runs; idle waits are not sampled)\n\n"
        f"Inclusive (share of samples with the frame on the stack):\n\n{top(stacks, 40)}\n\n"
        f"Self (share of samples with the frame on top):\n\n{top(leaves, 25)}\n"
    )
    log(f"[idle] wrote {PROFILE}")


def write_report(out: Path, args: argparse.Namespace, samples: list[Sample]) -> None:
    def med(system: str, field: str) -> float:
        return statistics.median(getattr(s, field) for s in samples if s.system == system)

    rows = []
    for label, field, fmt, scale in (
        ("idle CPU per broker, % of a core", "cpu_share", "{:.1f}", 100.0),
        ("create + full ISR, s", "create_s", "{:.1f}", 1.0),
        ("RSS per broker (largest), MiB", "rss_mib", "{:,.0f}", 1.0),
    ):
        k, m = med("Kafka", field) * scale, med("Millrace", field) * scale
        rows.append(f"| {label} | {fmt.format(k)} | {fmt.format(m)} | **{m / max(k, 1e-9):.2f}** |")
    table = "\n".join(rows)
    profile = (
        f"\nWhere an idle Millrace broker's CPU goes: `{PROFILE.relative_to(ROOT)}` (py-spy).\n"
        if args.profile
        else ""
    )
    section = f"""{HEADING}

The idle cost of many partitions: 3 brokers each (Apache Kafka {KAFKA_VERSION} on Millrace's
ZooKeeper), one topic of {args.partitions:,} partitions with RF=3 (so each broker leads
{args.partitions // 3:,} and follows {2 * args.partitions // 3:,}), then no traffic: CPU over
{args.seconds} s after {args.settle} s of settling, the systems one after the other; lower is
better in every row. {args.runs} run(s), medians; run {datetime.date.today().isoformat()} on:
{machine()}.

| measure | Kafka | Millrace | Millrace / Kafka |
|---|---:|---:|---:|
{table}
{profile}
Reproduce: `.venv/bin/python -m bench.idle_partitions --partitions {args.partitions}
--seconds {args.seconds} --runs {args.runs}` (`make bench` runs it).
"""
    replace_section(out, HEADING, section)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.idle_partitions", description=__doc__)
    p.add_argument("--partitions", type=int, default=3000)
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--settle", type=int, default=20)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--profile-seconds", type=int, default=20)
    p.add_argument("--only", choices=["kafka", "millrace"], help="measure one system only")
    p.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = p.parse_args(argv)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="millrace-bench-idle-") as tmp:
        for r in range(args.runs):
            kinds = ["kafka", "millrace"] if r % 2 == 0 else ["millrace", "kafka"]
            for kind in kinds:
                if args.only and kind != args.only:
                    continue
                log(f"[idle] run {r + 1}/{args.runs}: {kind}")
                d = Path(tmp) / f"{kind}-{r}"
                millrace = MillraceSystem(d / "millrace", 3)
                try:
                    if kind == "millrace":
                        samples.append(measure(millrace, args, args.profile and r == 0))
                    else:
                        kafka = KafkaSystem(d / "kafka", 3, millrace.zk_connect)
                        try:
                            samples.append(measure(kafka, args, False))
                        finally:
                            kafka.stop()
                finally:
                    millrace.stop()
    if args.only:
        for s in samples:
            print(
                f"{s.system}: {s.cpu_share * 100:.1f}% per broker, create {s.create_s:.1f}s, "
                f"RSS {s.rss_mib:.0f} MiB"
            )
        return 0
    write_report(Path(args.out), args, samples)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
