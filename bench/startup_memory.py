"""A broker's memory during start-up against its steady memory (issue 31, target 6).

One Millrace broker (``millrace cluster up --brokers 1``, a fresh cluster directory each
run), started three ways:

* **empty, first start**: the cluster's first start, nothing on disk;
* **with data, clean restart**: after ``--topics`` topics of 8 partitions (10,000 records
  each), one partition of ``--log-mb`` MB (1 KiB records), and ``--groups`` consumer groups
  committing offsets (which creates ``__consumer_offsets``, 50 partitions), the broker is
  stopped (SIGTERM, a clean shutdown) and started again;
* **with data, after SIGKILL**: ``--unflushed-mb`` MB more into the large partition, then
  SIGKILL and a start that re-validates them (recovery from the recovery point).

For each start: the **peak RSS during start** is the broker process's ``VmHWM`` (its
high-water mark since the process began) ``--grace`` seconds after it logged ``broker <id>
started`` (so the coordinators' loads of ``__consumer_offsets`` count); the **steady RSS** is
its ``VmRSS`` ``--settle`` seconds after that; the target is peak <= 1.2x steady. The RSS of
the broker's child processes (the ``multiprocessing`` resource tracker of the log cleaner's
process pool; cleaner workers if a round runs) is shown apart: they are other processes.

``--baseline DIR`` also measures the brokers of another source tree (an earlier checkout,
its native extensions built), alternating with this tree, and puts both side by side.

Writes the section "Broker start-up memory" of ``BENCHMARKS.md``.

Usage: ``python -m bench.startup_memory [--runs N] [--settle S] [--log-mb MB]
[--baseline DIR] [--out F]``. Progress to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import ROOT, free_port, machine, replace_section
from bench.compare import log

HEADING = "## Broker start-up memory"
STARTS = ("empty, first start", "with data, clean restart", "with data, after SIGKILL")
BIG_TOPIC = "startup-big"
VALUE = bytes(range(256)) * 4  # 1 KiB


@dataclass(slots=True)
class Sample:
    tree: str  # "this tree" or "baseline"
    start: str  # one of STARTS
    peak_mib: float  # VmHWM after start-up
    steady_mib: float  # VmRSS after --settle
    later_peak_mib: float  # VmHWM after --settle (a peak after start-up would show here)
    children_mib: float  # the broker's descendants' RSS after --settle
    recovered_mib: float  # the records recovery re-validated, MiB (after SIGKILL only)

    @property
    def ratio(self) -> float:
        return self.peak_mib / self.steady_mib


def _status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


def _descendants_rss_mib(pid: int) -> float:
    """The summed RSS of ``pid``'s descendants (0 for those gone meanwhile)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    total = 0.0
    todo = list(children.get(pid, ()))
    while todo:
        p = todo.pop()
        try:
            total += _status_mib(p, "VmRSS")
        except (OSError, RuntimeError):
            continue
        todo.extend(children.get(p, ()))
    return total


class Cluster:
    """A one-broker cluster of source tree ``tree`` in ``directory`` (``millrace cluster``
    run from ``tree``, so the broker runs that tree's code)."""

    def __init__(self, tree: Path, directory: Path) -> None:
        self.tree = tree
        self.directory = directory
        self.bootstrap = ""

    def cli(self, *args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "broker.cli.main", *args],
            cwd=self.tree,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def up(self) -> None:
        out = self.cli(
            "cluster",
            "up",
            "--dir",
            str(self.directory),
            "--brokers",
            "1",
            "--base-port",
            str(free_port()),
            "--zk-port",
            str(free_port()),
            "--set",
            "group.initial.rebalance.delay.ms=0",
        )
        self.bootstrap = out.strip().splitlines()[-1]

    @property
    def info(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.directory / "cluster.json").read_text())
        return data

    @property
    def broker(self) -> dict[str, Any]:
        brokers = self.info["brokers"]
        assert isinstance(brokers, list)
        return dict(brokers[0])

    def starts_logged(self) -> int:
        """How many times the broker logged that it started."""
        out = Path(self.broker["out"])
        return out.read_text(errors="replace").count("started (cluster") if out.exists() else 0

    def stop_broker(self, hard: bool) -> None:
        hard_args = ["--hard"] if hard else []
        self.cli(
            "cluster", "stop-broker", "--dir", str(self.directory), "--broker", "1", *hard_args
        )

    def start_broker(self) -> None:
        self.cli("cluster", "start-broker", "--dir", str(self.directory), "--broker", "1")

    def down(self) -> None:
        self.cli("cluster", "down", "--dir", str(self.directory))


def measure_start(
    cluster: Cluster, tree: str, start: str, before: int, args: argparse.Namespace
) -> Sample:
    """Wait for start number ``before + 1`` to be logged, then read the broker's memory."""
    deadline = time.monotonic() + 120
    while cluster.starts_logged() <= before:
        if time.monotonic() > deadline:
            raise SystemExit(f"the broker did not log its start; see {cluster.broker['out']}")
        time.sleep(0.1)
    pid = int(cluster.broker["pid"])
    time.sleep(args.grace)
    peak = _status_mib(pid, "VmHWM")
    time.sleep(max(args.settle - args.grace, 0))
    sample = Sample(
        tree,
        start,
        peak,
        _status_mib(pid, "VmRSS"),
        _status_mib(pid, "VmHWM"),
        _descendants_rss_mib(pid),
        0.0,
    )
    log(
        f"  {tree:<9} {start:<26} peak {sample.peak_mib:6.1f} MiB, steady "
        f"{sample.steady_mib:6.1f} MiB ({sample.ratio:.2f}x); children {sample.children_mib:.0f} MiB"
    )
    return sample


def _produce(bootstrap: str, topic: str, n: int, value: bytes, partition: int | None) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=b"%d" % i, **kwargs)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300) != 0:
        raise SystemExit(f"{topic}: produce did not finish")


def fill(bootstrap: str, args: argparse.Namespace) -> None:
    """The topics, the large partition and the consumer groups of the "with data" starts."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(BIG_TOPIC, 1, 1)] + [
        NewTopic(f"startup-{i}", 8, 1) for i in range(args.topics)
    ]
    for future in admin.create_topics(topics, operation_timeout=60).values():
        future.result(60)
    _produce(bootstrap, BIG_TOPIC, args.log_mb * 1024, VALUE, 0)
    for i in range(args.topics):
        _produce(bootstrap, f"startup-{i}", 10_000, VALUE[:100], None)
    for g in range(args.groups):
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"startup-{g}",
                "enable.auto.commit": False,
            }
        )
        try:
            c.commit(
                offsets=[TopicPartition("startup-0", k, 100 + g) for k in range(8)],
                asynchronous=False,
            )
        finally:
            c.close()


def _recovery_point(data_dir: Path) -> int:
    """The recovery point of the large partition in the broker's checkpoint."""
    for line in (data_dir / "recovery-point-offset-checkpoint").read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if topic == BIG_TOPIC and partition == "0":
            return int(offset)
    return 0


def run_once(tree: Path, label: str, directory: Path, args: argparse.Namespace) -> list[Sample]:
    """The three starts of one fresh cluster of ``tree``."""
    cluster = Cluster(tree, directory)
    samples = []
    try:
        cluster.up()
        samples.append(measure_start(cluster, label, STARTS[0], 0, args))
        log(f"  {label}: filling ({args.topics} topics, {args.log_mb} MB, {args.groups} groups)")
        fill(cluster.bootstrap, args)
        before = cluster.starts_logged()
        cluster.stop_broker(hard=False)
        cluster.start_broker()
        samples.append(measure_start(cluster, label, STARTS[1], before, args))
        records = (args.log_mb + args.unflushed_mb) * 1024
        _produce(cluster.bootstrap, BIG_TOPIC, args.unflushed_mb * 1024, VALUE, 0)
        before = cluster.starts_logged()
        cluster.stop_broker(hard=True)
        unflushed = records - _recovery_point(Path(cluster.broker["log_dirs"][0]))
        cluster.start_broker()
        sample = measure_start(cluster, label, STARTS[2], before, args)
        sample.recovered_mib = unflushed * len(VALUE) / 2**20
        samples.append(sample)
    finally:
        try:
            cluster.down()
        except subprocess.CalledProcessError as exc:
            log(f"  cluster down failed: {exc.stderr}")
    return samples


def _median(samples: list[Sample], tree: str, start: str, field: str) -> float:
    return statistics.median(
        getattr(s, field) for s in samples if s.tree == tree and s.start == start
    )


def write_report(out: Path, args: argparse.Namespace, samples: list[Sample]) -> None:
    trees = ["baseline", "this tree"] if args.baseline else ["this tree"]
    rows = []
    for start in STARTS:
        cells = []
        for tree in trees:
            peak = _median(samples, tree, start, "peak_mib")
            steady = _median(samples, tree, start, "steady_mib")
            ratio = _median(samples, tree, start, "ratio")
            cells.append(f"{peak:.0f} | {steady:.0f} | **{ratio:.2f}x**")
        later = _median(samples, "this tree", start, "later_peak_mib")
        children = _median(samples, "this tree", start, "children_mib")
        rows.append(f"| {start} | {' | '.join(cells)} | {later:.0f} | {children:.0f} |")
    recovered = _median(samples, "this tree", STARTS[2], "recovered_mib")
    if args.baseline:
        head = (
            "| start | before: peak during start | before: steady | before: peak / steady "
            "| after: peak during start | after: steady | after: peak / steady "
            "| after: peak over the settle | after: child processes |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        )
        before = (
            f"Before: the tree at `{args.baseline_label}`; after: this tree."
            if args.baseline_label
            else "Before: the baseline tree; after: this tree."
        )
    else:
        head = (
            "| start | peak during start | steady | peak / steady | peak over the settle "
            "| child processes |\n|---|---:|---:|---:|---:|---:|"
        )
        before = ""
    table = "\n".join(rows)
    section = f"""{HEADING}

One Millrace broker (`millrace cluster up --brokers 1`, a fresh cluster each run), started
three ways: its first start, nothing on disk; a clean restart (SIGTERM, then start) after
{args.topics} topics of 8 partitions, one partition of {args.log_mb} MB (1 KiB records) and
{args.groups} consumer groups' commits (`__consumer_offsets`, 50 partitions); a start after
SIGKILL that re-validates the {recovered:.0f} MiB written since the clean restart.
*Peak during start*: the broker process's `VmHWM` {args.grace:g} s after it logged its start;
*steady*: its `VmRSS` {args.settle:g} s later; target: peak <= 1.2x steady (issue 31). The
child processes (the log cleaner pool's `multiprocessing` resource tracker) are other
processes, shown apart. MiB, medians of {args.runs} runs. {before}
Run {datetime.date.today().isoformat()} on: {machine()}.

{head}
{table}

What the peak was (256 MiB against 66-68 MiB steady): `kio` registers Hypothesis strategies
for its types when Hypothesis is importable (the `test` extra), and the one for `str` builds
Hypothesis's Unicode character map, a ~200 MB transient lasting about a second, whenever the
process's working directory has no `.hypothesis/` cache, which it then writes there: every
first start in a fresh cluster directory. Hypothesis and what it imports (pytest, attrs,
trio, pygments: ~300 modules) also stayed resident, ~20 MiB of the steady RSS, and slowed
the start: a broker's imports took 3.0 s in a fresh directory, 0.5 s now. `kio_loader/__init__.py`
now imports `kio` with Hypothesis hidden (in the broker, its cleaner workers and the
`millrace` command). Recovery read the `.log` in 4 MiB `bytes` windows, two alive at each
step, and the heap kept them: about 10 MiB more steady RSS after a recovery; it now
refills one 1 MiB buffer in place.

Reproduce: `.venv/bin/python -m bench.startup_memory --runs {args.runs} --settle {args.settle:g}
--log-mb {args.log_mb} --unflushed-mb {args.unflushed_mb}` (`make bench` runs it; `--baseline DIR`
adds the brokers of an earlier checkout, side by side).
"""
    replace_section(out, HEADING, section)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.startup_memory", description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--settle", type=float, default=60.0, help="seconds until steady RSS")
    p.add_argument("--grace", type=float, default=5.0, help="seconds after the start log")
    p.add_argument("--topics", type=int, default=3)
    p.add_argument("--log-mb", type=int, default=100)
    p.add_argument("--unflushed-mb", type=int, default=50)
    p.add_argument("--groups", type=int, default=20)
    p.add_argument("--baseline", type=Path, help="an earlier source tree to measure too")
    p.add_argument("--baseline-label", default="", help="what the baseline is (a commit)")
    p.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = p.parse_args(argv)
    trees = [("this tree", ROOT)]
    if args.baseline:
        trees.insert(0, ("baseline", args.baseline.resolve()))
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="millrace-bench-startup-") as tmp:
        for r in range(args.runs):
            order = trees if r % 2 == 0 else trees[::-1]
            for label, tree in order:
                log(f"[startup memory] run {r + 1}/{args.runs} {label} ({tree})")
                samples += run_once(tree, label, Path(tmp) / f"{label.replace(' ', '-')}-{r}", args)
    write_report(Path(args.out), args, samples)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
