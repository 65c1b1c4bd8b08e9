"""Millrace beside Apache Kafka: the side-by-side benchmark (``make bench``).

Starts Millrace (``millrace cluster up``) and Apache Kafka 3.9.1 (its jars from Maven Central,
sharing Millrace's embedded ZooKeeper) on this machine, runs every workload against both with
the same clients, alternating which system goes first in each run, and writes
``BENCHMARKS.md`` (section "Millrace beside Apache Kafka") plus PNG plots in ``benchmarks/``
and the raw measurements in ``benchmarks/results.json``.

Workloads (numbers as in the benchmark issue):

1. produce 100-byte records, 1 partition, 1 broker, acks=1: ``kafka-producer-perf-test``
   and the confluent-kafka load generator;
2. the same with 3 brokers, RF=3, ``min.insync.replicas=2``, acks=all;
3. catch-up consume of workload 1's data: ``kafka-consumer-perf-test`` and confluent-kafka;
4. end-to-end latency at a fixed rate;
5. Spark: count, ``noop`` write, streaming read (``maxOffsetsPerTrigger``) and write (also
   exactly-once with ``format("millrace")``), with
   ``format("millrace")`` and Spark's own ``format("kafka")``, against both brokers;
6. produce throughput with 1..1,000 partitions, and with a little vs a lot already stored.

Also measured in the same run: each broker's CPU seconds and peak RSS per workload, the
machine's loopback and disk throughput, and (``--profile``) a py-spy profile of the Millrace
broker under workload 1.

Usage: ``python -m bench.compare [--quick] [--out BENCHMARKS.md]``; ``--help`` lists the
sizes. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import confluent_kafka

from bench import loadgen, perf_tools, spark_workload
from bench.common import ROOT, commit, machine
from bench.procstat import Meter, Usage
from bench.results import Measurement, Run
from bench.systems import KAFKA_VERSION, LOG4J, KafkaSystem, MillraceSystem, System

T = TypeVar("T")
QUICK_DIR = Path(tempfile.gettempdir()) / "millrace-bench-quick"
ACKS1 = {"acks": "1", "linger.ms": "5"}
ACKS_ALL = {"acks": "all", "linger.ms": "5", "enable.idempotence": "true"}


def log(text: str) -> None:
    sys.stderr.write(f"\r{time.strftime('%H:%M:%S')} {text:<90}\n")
    sys.stderr.flush()


def metered(system: System, fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, Usage]:
    """``fn(*args, **kwargs)`` and the system's broker CPU and peak RSS meanwhile."""
    meter = Meter(system.pids).start()
    result = fn(*args, **kwargs)
    return result, meter.stop()


def orders(systems: list[System], runs: int) -> Iterator[tuple[int, list[System]]]:
    """Run r goes Kafka first when r is even, Millrace first when odd."""
    for r in range(runs):
        yield r, (systems if r % 2 == 0 else list(reversed(systems)))


@contextmanager
def both(
    tmp: Path,
    brokers: int,
    warm_up_records: int,
    settings: dict[str, str] | None = None,
    kafka_log4j: str = LOG4J,
) -> Iterator[list[System]]:
    """Millrace and Kafka with ``brokers`` brokers each, Kafka on Millrace's ZooKeeper; the
    broker ``settings`` on both, ``kafka_log4j`` as Kafka's log4j configuration."""
    log(f"starting Millrace ({brokers} broker(s)) and its ZooKeeper")
    millrace = MillraceSystem(tmp / f"millrace-{brokers}", brokers, settings)
    try:
        log(f"starting Apache Kafka {KAFKA_VERSION} ({brokers} broker(s)) on the same ZooKeeper")
        kafka = KafkaSystem(
            tmp / f"kafka-{brokers}", brokers, millrace.zk_connect, settings, kafka_log4j
        )
        try:
            for system in (kafka, millrace):
                warm_up(system, warm_up_records)
            yield [kafka, millrace]
        finally:
            log("stopping Kafka")
            kafka.stop()
    finally:
        log("stopping Millrace")
        millrace.stop()


def warm_up(system: System, records: int) -> None:
    """Every path exercised before anything is measured, not recorded: ``records`` records
    produced and consumed with Kafka's perf tools, then a tenth of that with confluent-kafka.
    Kafka's broker needs this: its JIT is still compiling the produce path after a few
    hundred thousand records (workload 1 measured ~2.4x below its later, warm rate)."""
    log(f"warming up {system.name} ({records:,} records)")
    topic = "warm-up"
    system.create_topic(topic, 1, min(3, system.brokers))
    perf_tools.producer_perf(system.bootstrap, topic, records, props=ACKS1)
    perf_tools.consumer_perf(system.bootstrap, topic, records, "warm-up")
    loadgen.produce(system.bootstrap, topic, records // 10, dict(ACKS1))
    loadgen.consume(system.bootstrap, topic, records // 10)


class Bench:
    def __init__(self, args: argparse.Namespace, run: Run) -> None:
        self.a = args
        self.run = run
        self.topic_seq = 0
        self.w1_topics: dict[str, list[str]] = {}  # system -> workload 1's topics, for 3

    def topic(self, system: System, prefix: str) -> str:
        self.topic_seq += 1
        return f"{prefix}-{system.name.lower()}-{self.topic_seq}"

    def record(
        self, workload: str, case: str, system: System, metrics: dict[str, float], usage: Usage
    ) -> None:
        self.run.add(Measurement.of(workload, case, system.name, metrics, usage))
        self.run.save(Path(self.a.results))  # a failure later loses nothing measured
        shown = ", ".join(f"{k} {v:,.1f}" for k, v in metrics.items())
        log(f"  [{workload}] {system.name:<8} {case}: {shown}")

    # ----------------------------------------------------------------- workloads 1 and 2
    def produce(self, workload: str, systems: list[System], rf: int, props: dict[str, str]) -> None:
        n = self.a.records
        configs = {"min.insync.replicas": "2"} if rf == 3 else {}
        for r, order in orders(systems, self.a.runs):
            for s in order:
                log(f"[{workload}] run {r + 1}/{self.a.runs} {s.name}: kafka-producer-perf-test")
                t = self.topic(s, f"w{workload}-java")
                s.create_topic(t, 1, rf, configs)
                res, use = metered(s, perf_tools.producer_perf, s.bootstrap, t, n, props=props)
                self.record(
                    workload,
                    "kafka-producer-perf-test",
                    s,
                    {
                        "records/s": res.records_s,
                        "MB/s": res.records_s * 100 / 1e6,
                        "p50 ms": res.p50_ms,
                        "p99 ms": res.p99_ms,
                        "p99.9 ms": res.p999_ms,
                    },
                    use,
                )
                log(f"[{workload}] run {r + 1}/{self.a.runs} {s.name}: confluent-kafka")
                t = self.topic(s, f"w{workload}-py")
                s.create_topic(t, 1, rf, configs)
                pr, use = metered(s, loadgen.produce, s.bootstrap, t, n, dict(props))
                self.record(
                    workload,
                    "confluent-kafka",
                    s,
                    {
                        "records/s": pr.records_s,
                        "MB/s": pr.mb_s,
                        "p50 ms": pr.p50_ms,
                        "p99 ms": pr.p99_ms,
                    },
                    use,
                )
                if workload == "1":
                    self.w1_topics.setdefault(s.name, []).append(t)

    # ----------------------------------------------------------------- workload 3
    def consume(self, systems: list[System]) -> None:
        n = self.a.records
        for r, order in orders(systems, self.a.runs):
            for s in order:
                t = self.w1_topics[s.name][r % len(self.w1_topics[s.name])]
                log(f"[3] run {r + 1}/{self.a.runs} {s.name}: kafka-consumer-perf-test")
                group = f"perf-{s.name.lower()}-{r}"
                cres, use = metered(s, perf_tools.consumer_perf, s.bootstrap, t, n, group)
                self.record(
                    "3",
                    "kafka-consumer-perf-test",
                    s,
                    {
                        "records/s": cres.fetch_records_s,
                        "MB/s": cres.fetch_records_s * 100 / 1e6,
                        "records/s incl. group join": cres.records_s,
                    },
                    use,
                )
                log(f"[3] run {r + 1}/{self.a.runs} {s.name}: confluent-kafka")
                pres, use = metered(s, loadgen.consume, s.bootstrap, t, n)
                self.record(
                    "3",
                    "confluent-kafka",
                    s,
                    {"records/s": pres.records_s, "MB/s": pres.mb_s},
                    use,
                )

    # ----------------------------------------------------------------- workload 4
    def latency(self, systems: list[System]) -> None:
        rate = self.a.e2e_rate
        for s in systems:
            # Unrecorded: the produce-and-woken-fetch path at this rate, so Kafka's JIT has
            # compiled it before the first measured run (without this, its first run's p99
            # was 150-350 ms).
            log(f"[4] warm-up {s.name}: {rate:,} records/s end to end, not recorded")
            t = self.topic(s, "w4-warm-up")
            s.create_topic(t, 1, 1)
            loadgen.end_to_end(s.bootstrap, t, rate, self.a.e2e_seconds, self.a.e2e_warmup)
        for r, order in orders(systems, self.a.runs):
            for s in order:
                log(f"[4] run {r + 1}/{self.a.runs} {s.name}: {rate:,} records/s end to end")
                t = self.topic(s, "w4")
                s.create_topic(t, 1, 1)
                lat, use = metered(
                    s,
                    loadgen.end_to_end,
                    s.bootstrap,
                    t,
                    rate,
                    self.a.e2e_seconds,
                    self.a.e2e_warmup,
                )
                self.record(
                    "4",
                    f"{rate:,} records/s",
                    s,
                    {
                        "p50 ms": lat.p50_ms,
                        "p99 ms": lat.p99_ms,
                        "p99.9 ms": lat.p999_ms,
                        "max ms": lat.max_ms,
                    },
                    use,
                )

    # ----------------------------------------------------------------- workload 5
    def spark(self, systems: list[System]) -> None:
        n = self.a.spark_records
        log("[5] starting Spark (local[2]) with format('millrace') and format('kafka')")
        spark = spark_workload.session()
        try:
            topics: dict[str, str] = {}
            for s in systems:
                t = self.topic(s, "w5")
                s.create_topic(t, 2, 1)
                log(f"[5] loading {n:,} records into {s.name} ({t}, 2 partitions)")
                perf_tools.producer_perf(s.bootstrap, t, n, props=ACKS1)
                topics[s.name] = t
            # Warm-up: starts Spark's Python workers and the JIT before anything is timed.
            for fmt in spark_workload.FORMATS:
                log(f"[5] warm-up: format('{fmt}') count() on Millrace")
                spark_workload.count(spark, fmt, systems[1].bootstrap, topics["Millrace"], n)
            for r, order in orders(systems, self.a.spark_runs):
                for s in order:
                    t = topics[s.name]
                    for fmt in spark_workload.FORMATS:
                        log(f"[5] run {r + 1}/{self.a.spark_runs} {s.name}: format('{fmt}')")
                        args = (spark, fmt, s.bootstrap, t)
                        stream_case = f"stream, maxOffsetsPerTrigger={self.a.max_offsets:,}"
                        for step, seconds, use in (
                            ("count", *metered(s, spark_workload.count, *args, n)),
                            ("noop write", *metered(s, spark_workload.noop, *args)),
                            (
                                stream_case,
                                *metered(s, spark_workload.stream, *args, n, self.a.max_offsets),
                            ),
                        ):
                            self.record(
                                "5",
                                f'{step}: format("{fmt}")',
                                s,
                                {"rows/s": n / seconds, "seconds": seconds},
                                use,
                            )
                        out = self.topic(s, "w5-out")
                        s.create_topic(out, 2, 1)
                        seconds, use = metered(
                            s, spark_workload.write, spark, fmt, s.bootstrap, out, n
                        )
                        self.record(
                            "5",
                            f'write: format("{fmt}")',
                            s,
                            {"rows/s": n / seconds, "seconds": seconds},
                            use,
                        )
                    seconds, use = metered(s, spark_workload.ceiling, spark, n)
                    self.record(
                        "5",
                        "ceiling: count of an in-memory Arrow Python source (no broker)",
                        s,
                        {"rows/s": n / seconds, "seconds": seconds},
                        use,
                    )
                    out = self.topic(s, "w5-eos-out")
                    s.create_topic(out, 2, 1)
                    seconds, use = metered(
                        s, spark_workload.write_exactly_once, spark, s.bootstrap, out, n
                    )
                    self.record(
                        "5",
                        'write exactly-once: format("millrace")',
                        s,
                        {"rows/s": n / seconds, "seconds": seconds},
                        use,
                    )
                    out = self.topic(s, "w5-rd-out")
                    s.create_topic(out, 2, 1)
                    seconds, use = metered(
                        s,
                        spark_workload.write,
                        spark,
                        "millrace",
                        s.bootstrap,
                        out,
                        n,
                        "librdkafka",
                    )
                    self.record(
                        "5",
                        'write, producer=librdkafka: format("millrace")',
                        s,
                        {"rows/s": n / seconds, "seconds": seconds},
                        use,
                    )
        finally:
            spark.stop()

    # ----------------------------------------------------------------- workload 6
    def partitions(self, systems: list[System]) -> None:
        n = self.a.records
        for count in self.a.partitions:
            for r, order in orders(systems, self.a.runs):
                for s in order:
                    log(f"[6] run {r + 1}/{self.a.runs} {s.name}: {count} partition(s)")
                    t = self.topic(s, f"w6-p{count}")
                    t0 = time.perf_counter()
                    s.create_topic(t, count, 1)
                    created_s = time.perf_counter() - t0
                    res, use = metered(s, perf_tools.producer_perf, s.bootstrap, t, n, props=ACKS1)
                    self.record(
                        "6a",
                        f"{count:,} partition(s)",
                        s,
                        {
                            "records/s": res.records_s,
                            "p99 ms": res.p99_ms,
                            "create topic s": created_s,
                        },
                        use,
                    )

    def stored(self, systems: list[System]) -> None:
        """Fill each system to each --stored-gb level with 100 kB records in a 4-partition
        topic, then measure 100-byte produce into a fresh 1-partition topic."""
        n = self.a.records
        record = 100_000
        fill = {
            "acks": "1",
            "linger.ms": "20",
            "batch.size": "1000000",
            "max.request.size": "1000000",
        }
        for s in systems:
            filler = self.topic(s, "w6-stored")
            s.create_topic(filler, 4, 1)
            stored = 0
            for gb in self.a.stored_gb:
                want = int(gb * 1e9) - stored
                if want > 0:
                    log(f"[6] {s.name}: storing {gb:g} GB (100 kB records)")
                    fres, use = metered(
                        s,
                        perf_tools.producer_perf,
                        s.bootstrap,
                        filler,
                        want // record,
                        record,
                        fill,
                    )
                    stored += (want // record) * record
                    self.record(
                        "6c",
                        f"fill to {gb:g} GB",
                        s,
                        {"MB/s": fres.records_s * record / 1e6},
                        use,
                    )
                on_disk = s.stored_bytes() / 1e9
                for r in range(self.a.runs):
                    log(f"[6] run {r + 1}/{self.a.runs} {s.name}: produce with {gb:g} GB stored")
                    t = self.topic(s, "w6-s")
                    s.create_topic(t, 1, 1)
                    res, use = metered(s, perf_tools.producer_perf, s.bootstrap, t, n, props=ACKS1)
                    self.record(
                        "6b",
                        f"{gb:g} GB stored",
                        s,
                        {"records/s": res.records_s, "p99 ms": res.p99_ms, "GB on disk": on_disk},
                        use,
                    )
            s.delete_topic(filler)


def limits(tmp: Path, megabytes: int) -> dict[str, float]:
    from bench import limits as machine_limits

    lim = machine_limits.describe(tmp, megabytes)
    return {
        "loopback MB/s": lim.loopback_mb_s,
        "disk buffered MB/s": lim.disk_buffered_mb_s,
        "disk fdatasync MB/s": lim.disk_fdatasync_mb_s,
    }


def profile_millrace(bench: Bench, millrace: System, out_dir: Path) -> dict[str, Any]:
    """py-spy (500 samples/s of on-CPU stacks) on the Millrace broker while workload 1 runs
    three times over: ``3 x --records`` with kafka-producer-perf-test, then with the
    confluent-kafka load generator, each into its own fresh 1-partition topic."""
    from bench import hotspots

    raw = out_dir / ("profile-w1-quick.txt" if bench.a.quick else "profile-w1.txt")
    n = 3 * bench.a.records
    log(f"[profile] py-spy on the Millrace broker during workload 1 ({n:,} records per client)")
    topics = [bench.topic(millrace, "profile"), bench.topic(millrace, "profile")]
    for t in topics:
        millrace.create_topic(t, 1, 1)
    proc = hotspots.start(millrace.pids[0], raw, rate=500)
    try:
        time.sleep(1.0)
        perf_tools.producer_perf(millrace.bootstrap, topics[0], n, props=ACKS1)
        loadgen.produce(millrace.bootstrap, topics[1], n, dict(ACKS1))
    finally:
        try:
            hotspots.stop(proc)
        except RuntimeError as exc:
            log(f"[profile] failed, no profile in the report: {exc}")
            return {}
    prof = hotspots.summarize(raw, top=40)
    return {
        "samples": prof.total,
        "records": n,
        "raw": raw.name,
        "self": [(f, n, share) for f, n, share in prof.self_time[:10]],
        "inclusive": [(f, n, share) for f, n, share in prof.inclusive[:40]],
        "by_file": [(f, n, share) for f, n, share in prof.by_file[:10]],
    }


def context(args: argparse.Namespace) -> dict[str, Any]:
    import pyspark

    java = subprocess.run(["java", "-version"], check=False, capture_output=True, text=True).stderr
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "kernel": platform.release(),
        "java": java.splitlines()[0] if java else "unknown",
        "kafka": KAFKA_VERSION,
        "pyspark": pyspark.__version__,
        "spark_kafka_connector": ", ".join(
            sorted(p.name for p in spark_workload.SPARK_KAFKA_JARS.glob("spark-*.jar"))
        ),
        "confluent_kafka": f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})",
        "command": "make bench-quick" if args.quick else "make bench",
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "results")},
    }


def merged(results: Path, args: argparse.Namespace) -> Run:
    """The saved run in ``results`` without the measurements of the workloads about to be
    run again (``--merge``); the re-run is noted in its context."""
    if not results.exists():
        raise SystemExit(f"--merge: no saved run in {results}")
    run = Run.load(results)
    keys = {k for w in args.only for k in ((w,) if w != "6" else ("6a", "6b", "6c"))}
    run.measurements = [m for m in run.measurements if m.workload not in keys]
    if "1" in args.only and args.profile:
        run.context.pop("profile", None)
    run.context.setdefault("reruns", []).append(
        {
            "workloads": list(args.only),
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": machine(),
            "commit": commit(),
        }
    )
    return run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Millrace beside Apache Kafka (make bench)")
    ap.add_argument("--quick", action="store_true", help="reduced sizes (make bench-quick)")
    ap.add_argument("--records", type=int, help="records per produce/consume run")
    ap.add_argument("--runs", type=int, help="runs per case (medians)")
    ap.add_argument("--e2e-rate", type=int, default=20_000, help="records/s for workload 4")
    ap.add_argument("--e2e-seconds", type=float, help="measured seconds per latency run")
    ap.add_argument("--e2e-warmup", type=float, help="unmeasured seconds before that")
    ap.add_argument("--spark-records", type=int, help="records in the Spark topic")
    ap.add_argument("--spark-runs", type=int, help="runs per Spark case")
    ap.add_argument("--max-offsets", type=int, help="maxOffsetsPerTrigger for the stream")
    ap.add_argument("--partitions", type=int, nargs="+", help="partition counts for workload 6")
    ap.add_argument("--stored-gb", type=float, nargs="+", help="GB stored levels for workload 6")
    ap.add_argument(
        "--only", nargs="+", default=["1", "2", "3", "4", "5", "6"], help="workloads to run"
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="re-run the --only workloads into the saved results, keeping the others",
    )
    ap.add_argument("--no-profile", dest="profile", action="store_false")
    ap.add_argument("--out", help="report (default: BENCHMARKS.md; --quick: /tmp/...)")
    ap.add_argument("--results", help="results JSON (default: benchmarks/results[-quick].json)")
    args = ap.parse_args(argv)
    full = {
        "records": 1_000_000,
        "runs": 3,
        "e2e_seconds": 20.0,
        "e2e_warmup": 5.0,
        "spark_records": 10_000_000,
        "spark_runs": 3,
        "max_offsets": 1_000_000,
        "partitions": [1, 10, 100, 1000],
        "stored_gb": [1.0, 20.0],
    }
    quick = {
        "records": 100_000,
        "runs": 1,
        "e2e_seconds": 3.0,
        "e2e_warmup": 2.0,
        "spark_records": 200_000,
        "spark_runs": 1,
        "max_offsets": 50_000,
        "partitions": [1, 100],
        "stored_gb": [0.1, 0.5],
    }
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for name in ("records", "runs", "spark_records", "spark_runs", "max_offsets", "e2e_rate"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    bad = [w for w in args.only if w not in {"1", "2", "3", "4", "5", "6"}]
    if bad:
        ap.error(f"--only: unknown workload(s) {', '.join(bad)} (choose from 1-6)")
    if "3" in args.only and "1" not in args.only:
        ap.error("--only: workload 3 reads workload 1's topics; include 1")
    if args.out is None:
        args.out = str(QUICK_DIR.with_suffix(".md") if args.quick else ROOT / "BENCHMARKS.md")
    if args.results is None:
        where = QUICK_DIR if args.quick else ROOT / "benchmarks"
        args.results = str(where / ("results-quick.json" if args.quick else "results.json"))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench import report

    results = Path(args.results)
    run = merged(results, args) if args.merge else Run(context=context(args))
    bench = Bench(args, run)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="millrace-bench-", dir=ROOT / ".cache") as tmp_s:
        tmp = Path(tmp_s)
        if not args.merge:
            log("measuring the machine's loopback and disk throughput")
            run.context["limits"] = limits(tmp, 256 if args.quick else 1024)
        one = [w for w in args.only if w in {"1", "3", "4", "5", "6"}]
        if one:
            with both(tmp, 1, 2 * args.records) as systems:
                if "1" in one:
                    bench.produce("1", systems, 1, ACKS1)
                if "3" in one:
                    bench.consume(systems)
                if "4" in one:
                    bench.latency(systems)
                if "1" in one and args.profile:
                    run.context["profile"] = profile_millrace(bench, systems[1], results.parent)
                if "6" in one:
                    # Before Spark, whose topics and outputs (several GB) would count as stored.
                    bench.partitions(systems)
                    bench.stored(systems)
                if "5" in one:
                    bench.spark(systems)
                run.save(results)
        if "2" in args.only:
            with both(tmp, 3, 2 * args.records) as systems:
                bench.produce("2", systems, 3, ACKS_ALL)
    if args.merge:
        run.context["reruns"][-1]["elapsed_s"] = time.perf_counter() - started
    else:
        run.context["elapsed_s"] = time.perf_counter() - started
    run.save(results)
    report.write(run, Path(args.out), results.parent, quick=args.quick)
    log(
        f"done in {(time.perf_counter() - started) / 60:.1f} min: wrote {args.out} and {results.parent}/"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
