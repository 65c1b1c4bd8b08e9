"""The report of a side-by-side run: the "Millrace beside Apache Kafka" section of
``BENCHMARKS.md`` (tables per workload with both systems and the Millrace/Kafka ratio, the
machine, versions, limits and commands) and PNG plots next to it.

``python -m bench.report [results.json] [--out BENCHMARKS.md]`` renders a saved run again;
``--plots-only`` only redraws the plots (``bench.plots``) beside ``results.json``.
Ratios are Millrace / Kafka of the medians: above 1 means Millrace has more of the metric
(faster for rates, *slower* for latencies and seconds); the "verdict" column says which.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import plots
from bench.common import ROOT, replace_section
from bench.results import SYSTEMS, Run

HEADING = "## Millrace beside Apache Kafka"
LOWER_IS_BETTER = ("ms", "seconds", "create topic s")


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    what: str
    metrics: tuple[str, ...]
    headline: str


WORKLOADS = (
    Workload(
        "1",
        "1. Produce, 1 partition, 1 broker, acks=1",
        "100-byte records into a fresh 1-partition topic, `acks=1`, `linger.ms=5`, "
        "as fast as the client goes.",
        ("records/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms"),
        "records/s",
    ),
    Workload(
        "2",
        "2. Produce, 3 brokers, RF=3, acks=all",
        "As workload 1 into a topic with replication factor 3 and `min.insync.replicas=2`, "
        "`acks=all`, idempotent producer; three broker processes per system.",
        ("records/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms"),
        "records/s",
    ),
    Workload(
        "3",
        "3. Consume (catch-up read)",
        "Reading workload 1's topics from offset 0. `kafka-consumer-perf-test` joins a "
        "consumer group; its records/s is the tool's `fetch.nMsg.sec` (after the group join), "
        "the rate including the join is shown too. confluent-kafka assigns the partition.",
        ("records/s", "MB/s", "records/s incl. group join"),
        "records/s",
    ),
    Workload(
        "4",
        "4. End-to-end latency at a fixed rate",
        "A confluent-kafka producer in its own process (`acks=1`, `linger.ms=0`) stamps each "
        "100-byte record with the wall clock just before `produce()`; a confluent-kafka consumer "
        "(`fetch.wait.max.ms=100`) takes the difference on arrival. The first seconds (see Sizes) are warm-up, "
        "and each system first runs the whole workload once unrecorded (Kafka's JIT compiles this path then).",
        ("p50 ms", "p99 ms", "p99.9 ms", "max ms"),
        "p99 ms",
    ),
    Workload(
        "5",
        "5. Spark: both connectors against both brokers",
        "Spark `local[2]` reading a 2-partition topic (loaded with kafka-producer-perf-test): "
        "`count()`, a `noop` write of every column, an `availableNow` streaming read into "
        "`noop` with `maxOffsetsPerTrigger`, and a `df.write` of the same number of rows "
        '(string key, 100-byte value) into a fresh 2-partition topic (`format("millrace")` '
        "with its default batch producer, with `deliveryGuarantee=exactly-once` (the same "
        "producer, transactional, the driver committing every task's transaction), and again "
        "with `producer=librdkafka`, its per-row path).",
        ("rows/s", "seconds"),
        "rows/s",
    ),
    Workload(
        "6a",
        "6a. Produce throughput by partition count",
        "`kafka-producer-perf-test`, acks=1, `linger.ms=5`, into a fresh topic with N "
        "partitions on one broker (the Java client's default sticky partitioner); "
        "'create topic s' is CreateTopics until every partition has a leader in Metadata.",
        ("records/s", "p99 ms", "create topic s"),
        "records/s",
    ),
    Workload(
        "6b",
        "6b. Produce throughput with data already stored",
        "As workload 1 (`kafka-producer-perf-test`) into a fresh topic while the broker already "
        "stores the given amount in a 4-partition topic (filled with 100 kB records, workload "
        "6c).",
        ("records/s", "p99 ms", "GB on disk"),
        "records/s",
    ),
    Workload(
        "6c",
        "6c. Filling the store (100 kB records)",
        "`kafka-producer-perf-test --record-size 100000`, acks=1, `linger.ms=20`, "
        "`batch.size=1000000`: how fast each system takes large records (one run each).",
        ("MB/s",),
        "MB/s",
    ),
)


def _lower_better(metric: str) -> bool:
    return metric.endswith(LOWER_IS_BETTER)


def _fmt(value: float | None, metric: str = "") -> str:
    if value is None:
        return "—"
    if metric.endswith("ms") or metric in ("seconds", "create topic s", "GB on disk", "MB/s"):
        return f"{value:,.2f}" if value < 10 else f"{value:,.1f}"
    return f"{value:,.0f}"


def ratio(run: Run, w: str, case: str, metric: str) -> float | None:
    k = run.median(w, case, "Kafka", metric)
    m = run.median(w, case, "Millrace", metric)
    if k is None or m is None or k == 0:
        return None
    return m / k


NEUTRAL = ("GB on disk",)  # context, neither better nor worse


def verdict(r: float | None, metric: str) -> str:
    if r is None or metric in NEUTRAL:
        return "—"
    if 0.95 <= r <= 1.05:
        return "about equal"
    better = r < 1 if _lower_better(metric) else r > 1
    factor = r if r > 1 else 1 / r
    who = "Millrace" if better else "Kafka"
    return f"{who} {factor:.2f}x {'better' if _lower_better(metric) else 'faster'}"


def _table(run: Run, wl: Workload) -> str:
    lines = [
        "| case | metric | Kafka | Millrace | Millrace/Kafka | verdict |",
        "|---|---|---:|---:|---:|---|",
    ]
    for case in run.cases(wl.key):
        for metric in wl.metrics:
            k = run.median(wl.key, case, "Kafka", metric)
            m = run.median(wl.key, case, "Millrace", metric)
            if k is None and m is None:
                continue
            r = ratio(run, wl.key, case, metric)
            lines.append(
                f"| {case} | {metric} | {_fmt(k, metric)} | {_fmt(m, metric)} | "
                f"{'—' if r is None else f'{r:.2f}'} | {verdict(r, metric)} |"
            )
    lines += [
        "",
        "Brokers' resources during each case (medians): CPU seconds summed over the "
        "system's brokers, and the largest broker's peak RSS.",
        "",
        "| case | runs | Kafka CPU s | Kafka peak RSS MiB | Millrace CPU s | Millrace peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for case in run.cases(wl.key):
        cells = []
        runs = 0
        for system in SYSTEMS:
            usage = run.median_usage(wl.key, case, system)
            runs = max(runs, len(run.select(wl.key, case, system)))
            cells += ["—", "—"] if usage is None else [f"{usage[0]:.1f}", f"{usage[1]:,.0f}"]
        lines.append(f"| {case} | {runs} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _exactly_once_cost(run: Run, workload: str) -> str:
    """Workload 5: the exactly-once write's time against the at-least-once write's and
    against Spark's own (at-least-once) Kafka sink's, on each system (medians)."""
    if workload != "5":
        return ""
    lines = []
    for system in SYSTEMS:
        eos = run.median("5", 'write exactly-once: format("millrace")', system, "seconds")
        alo = run.median("5", 'write: format("millrace")', system, "seconds")
        spark = run.median("5", 'write: format("kafka")', system, "seconds")
        if eos is None or alo is None or spark is None:
            continue
        lines.append(
            f"- into {system}: exactly-once `df.write` takes {eos / alo:.2f}x the "
            f"at-least-once write's time and {eos / spark:.2f}x Spark's own "
            f'`format("kafka")` write\'s ({eos:.2f} s, {alo:.2f} s, {spark:.2f} s)'
        )
    return ("\n\nThe cost of exactly-once (medians):\n\n" + "\n".join(lines)) if lines else ""


def _summary(run: Run) -> str:
    lines = [
        "| workload | case | metric | Kafka | Millrace | Millrace/Kafka | verdict |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for wl in WORKLOADS:
        for case in run.cases(wl.key):
            metric = wl.headline
            r = ratio(run, wl.key, case, metric)
            lines.append(
                f"| {wl.key} | {case} | {metric} | "
                f"{_fmt(run.median(wl.key, case, 'Kafka', metric), metric)} | "
                f"{_fmt(run.median(wl.key, case, 'Millrace', metric), metric)} | "
                f"{'—' if r is None else f'{r:.2f}'} | {verdict(r, metric)} |"
            )
    return "\n".join(lines)


def _reruns(ctx: dict[str, Any]) -> str:
    reruns = ctx.get("reruns") or []
    if not reruns:
        return ""
    done = "; ".join(
        f"workload(s) {', '.join(r['workloads'])} on {r['date']}"
        f" ({r.get('elapsed_s', 0) / 60:.0f} min, `--only {' '.join(r['workloads'])} --merge`"
        + (f", commit {r['commit']}" if r.get("commit") else "")
        + (f", on {r['machine'].split(',')[0]}" if r.get("machine") else "")
        + ")"
        for r in reruns
    )
    return (
        "Measured again later (each workload's tables come from its latest run; machine and "
        f"commit noted where recorded): {done}.\n\n"
    )


# Frames on (nearly) every stack of the broker's main thread: the entry point and the event
# loop's own machinery. Left out of the inclusive table, which is about what the loop runs.
_SCAFFOLDING = (
    "<frozen runpy>",
    "asyncio/runners.py",
    "BaseEventLoop.run_forever",
    "BaseEventLoop.run_until_complete",
    "BaseEventLoop._run_once",
    "broker/cli/main.py",
    "broker/cli/broker_cmd.py:run",
    "asyncio/events.py:Handle._run",
)


def _scaffolding(label: str) -> bool:
    return any(part in label for part in _SCAFFOLDING)


def _profile(prof: dict[str, Any] | None) -> str:
    if not prof:
        return ""
    rows = "\n".join(
        f"| {i + 1} | `{label}` | {share * 100:.1f}% |"
        for i, (label, _n, share) in enumerate(prof["self"])
    )
    incl = "\n".join(
        f"| `{label}` | {share * 100:.1f}% |"
        for label, _n, share in [r for r in prof["inclusive"] if not _scaffolding(r[0])][:12]
    )
    files = "\n".join(f"| `{label}` | {share * 100:.1f}% |" for label, _n, share in prof["by_file"])
    return f"""
### Where the Millrace broker spends its time (workload 1)

py-spy sampling the broker process 500 times a second (on-CPU samples only: {prof["samples"]:,}
samples) while workload 1 runs with {prof.get("records", 0):,} records from
kafka-producer-perf-test and then {prof.get("records", 0):,} from the confluent-kafka load
generator (part of `make bench`; `--no-profile` skips it). Raw collapsed stacks:
`{prof.get("raw", "profile-w1.txt")}` beside the results.

Self time (the function on top of the stack):

| # | function | share of samples |
|---:|---|---:|
{rows}

Inclusive time (the function anywhere on the stack; the entry point and the event loop's
own frames, which are on nearly every stack, left out):

| function | share |
|---|---:|
{incl}

Self time by source file:

| file | share |
|---|---:|
{files}
"""


def write(run: Run, out: Path, plot_dir: Path, quick: bool = False) -> None:
    written = plots.write_all(run, plot_dir)
    ctx = run.context
    lim = ctx.get("limits", {})
    a = ctx.get("args", {})
    images = plots.markdown(written, out.parent)
    sections = "\n\n".join(
        f"### {wl.title}\n\n{wl.what}\n\n{_table(run, wl)}{_exactly_once_cost(run, wl.key)}"
        for wl in WORKLOADS
        if run.cases(wl.key)
    )
    section = f"""{HEADING}

Run {ctx.get("date", "?")} with `{ctx.get("command", "make bench")}` ({ctx.get("elapsed_s", 0) / 60:.0f} min) on:
{ctx.get("machine", "?")}. Everything (ZooKeeper, both systems' brokers, the clients and
Spark) shares this machine, so a client's own CPU competes with the broker's.

- **Apache Kafka {ctx.get("kafka", "?")}** (ZooKeeper mode, the jars from Maven Central,
  started as `bin/kafka-server-start.sh` would: `-Xmx1G -Xms1G`, G1), on Millrace's embedded
  ZooKeeper under the chroot `/apache-kafka`; {ctx.get("java", "?")}.
- **Millrace** from this commit (`millrace cluster up`), Python {ctx.get("machine", "").rsplit("Python ", 1)[-1]}.
- Same settings on both: listeners and log dirs on 127.0.0.1 and the same disk, no fsync per
  message (both defaults), `group.initial.rebalance.delay.ms=0`, internal topics' RF at most
  the broker count; everything else each system's defaults (Kafka's).
- Clients: Kafka's own `kafka-producer-perf-test` / `kafka-consumer-perf-test` (3.9.1, Java
  client, unchanged against both) and confluent-kafka {ctx.get("confluent_kafka", "?")}.
  Spark: pyspark {ctx.get("pyspark", "?")} with `format("millrace")` and Spark's own
  connector ({ctx.get("spark_kafka_connector", "?")}; the 4.3 build is not on Maven
  Central, see `jvm/spark-kafka/pom.xml`).
- Sizes: {a.get("records", 0):,} records per produce/consume run, medians of {a.get("runs", "?")}
  runs with the systems alternating which goes first; end-to-end at {a.get("e2e_rate", 0):,}
  records/s for {a.get("e2e_seconds", 0):g} s after {a.get("e2e_warmup", 0):g} s of warm-up; Spark topic {a.get("spark_records", 0):,} records,
  {a.get("spark_runs", "?")} run(s) after a warm-up; partitions {a.get("partitions")}; stored
  {a.get("stored_gb")} GB.
- Machine limits measured in the same run: loopback TCP {lim.get("loopback MB/s", 0):,.0f} MB/s
  (one Python connection), disk sequential write {lim.get("disk buffered MB/s", 0):,.0f} MB/s
  buffered and {lim.get("disk fdatasync MB/s", 0):,.0f} MB/s with fdatasync every 4 MiB.

{_reruns(ctx)}Reproduce: `make bench` (all of this, plus the Millrace-only cluster and group benchmarks
below) or `.venv/bin/python -m bench.compare` (this section only; `--help` for sizes,
`--only 1 3` for some workloads); `make bench-quick` runs reduced sizes in a few minutes
into `/tmp/millrace-bench-quick.md`. Raw figures: `{os.path.relpath(plot_dir / ("results-quick.json" if quick else "results.json"), out.parent)}`.

### Summary (headline metric per case)

Millrace/Kafka is the ratio of the medians; for rates above 1 means Millrace is faster, for
latencies and seconds above 1 means Millrace is slower.

{_summary(run)}

{images}

{sections}
{_profile(ctx.get("profile"))}"""
    replace_section(out, HEADING, section.rstrip() + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="render a saved bench.compare run")
    ap.add_argument("results", nargs="?", default=str(ROOT / "benchmarks" / "results.json"))
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    ap.add_argument(
        "--plots-only",
        action="store_true",
        help="only draw the PNG plots beside results.json, leave the report alone",
    )
    args = ap.parse_args(argv)
    results = Path(args.results)
    run = Run.load(results)
    if args.plots_only:
        for path in plots.write_all(run, results.parent):
            print(path)
        return 0
    write(run, Path(args.out), results.parent, quick="quick" in results.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
