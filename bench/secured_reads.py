"""What TLS and SASL cost a Spark read: ``format("millrace")`` reading the same topic over
PLAINTEXT and over SASL_SSL, on the connector's own fetch path both times.

One Millrace broker (``millrace cluster up --security sasl_ssl``: TLS, SCRAM-SHA-512, ACLs
enforced) with a second, PLAINTEXT listener on the same broker, so both reads fetch the same
log; one local Spark (``bench.spark_workload.session``). A topic of ``--records`` records
(100-byte values) in ``--partitions`` partitions is produced once; reading it are two users
with the same ACLs (READ and DESCRIBE on the topic and on the progress topic): ``reader``
over SASL_SSL (SCRAM-SHA-512, its credentials in ``kafka.sasl.jaas.config``, the CA in
``kafka.ssl.truststore.location``: Spark's option names) and the anonymous user over
PLAINTEXT. Then, ``--runs`` times, alternating the order:

1. ``count()`` over PLAINTEXT (the direct fetcher: whole record batches into Arrow);
2. ``count()`` over SASL_SSL (the same fetcher, its connections under TLS, logged in with
   SCRAM);
3. ``count()`` over SASL_SSL with ``fetcher=librdkafka`` (a confluent-kafka consumer per task:
   the path secured reads took before the connector's own client spoke TLS and SASL).

Each read is timed from the action to its result, and checks its count. Results: the section
"Secured Spark reads: SASL_SSL beside PLAINTEXT" of ``BENCHMARKS.md`` (machine named, medians,
the ratio to PLAINTEXT). Usage: ``python -m bench.secured_reads [--records N] [--partitions N]
[--runs N] [--out F]``; progress on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.basics import progress
from bench.common import ROOT, commit, free_port, machine, millrace, replace_section

HEADING = "## Secured Spark reads: SASL_SSL beside PLAINTEXT"
TOPIC = "secured-source"
READER = "reader"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
CASES = (
    ("plaintext", "PLAINTEXT, direct fetcher"),
    ("sasl_ssl", "SASL_SSL (SCRAM-SHA-512, TLS), direct fetcher"),
    ("sasl_ssl_librdkafka", "SASL_SSL, `fetcher=librdkafka` (the path before)"),
)


class SecuredCluster:
    """``cluster up --security sasl_ssl`` plus a PLAINTEXT listener on the same broker."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        port, plain = free_port(), free_port()
        while plain == port:
            plain = free_port()
        out = millrace(
            "cluster",
            "up",
            "--dir",
            str(directory),
            "--security",
            "sasl_ssl",
            "--base-port",
            str(port),
            "--zk-port",
            str(free_port()),
            "--set",
            f"listeners=SASL_SSL://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{plain}",
            "--set",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT",
        )
        self.secured = out.strip().splitlines()[-1]
        self.plaintext = f"127.0.0.1:{plain}"
        info = json.loads((directory / "cluster.json").read_text())
        self.admin_config: dict[str, str] = dict(info["client_config"])
        self.ca = self.admin_config["ssl.ca.location"]

    def conf(self, **extra: Any) -> dict[str, Any]:
        """The admin's librdkafka settings (over SASL_SSL)."""
        return {"bootstrap.servers": self.secured, **self.admin_config, **extra}

    def stop(self) -> None:
        millrace("cluster", "down", "--dir", str(self.directory))


def prepare(cluster: SecuredCluster, partitions: int, records: int, password: str) -> None:
    """The topic and its records; user ``reader`` and the anonymous user with READ and
    DESCRIBE on the topic and on the progress topic."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(cluster.conf())
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
    upsert = UserScramCredentialUpsertion(
        READER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for principal in (f"User:{READER}", "User:ANONYMOUS")
        for topic in (TOPIC, "__millrace_batches")
        for operation in (AclOperation.READ, AclOperation.DESCRIBE)
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    progress(f"producing {records:,} records")
    producer = Producer(
        cluster.conf(
            **{
                "linger.ms": 20,
                "batch.size": 1 << 20,
                "queue.buffering.max.messages": 1_000_000,
                "partitioner": "murmur2_random",
            }
        )
    )
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value, str(i).encode())
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise SystemExit("produce: records left unsent")


def read_options(cluster: SecuredCluster, case: str, password: str) -> dict[str, str]:
    if case == "plaintext":
        return {"kafka.bootstrap.servers": cluster.plaintext}
    options = {
        "kafka.bootstrap.servers": cluster.secured,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": f'{SCRAM} required username="{READER}" password="{password}";',
        "kafka.ssl.truststore.location": cluster.ca,
        "kafka.ssl.truststore.type": "PEM",
    }
    if case == "sasl_ssl_librdkafka":
        options["fetcher"] = "librdkafka"
    return options


def count(spark: Any, options: dict[str, str], expected: int) -> float:
    reader = spark.read.format("millrace").option("subscribe", TOPIC)
    for key, value in options.items():
        reader = reader.option(key, value)
    t0 = time.perf_counter()
    got = reader.load().count()
    seconds = time.perf_counter() - t0
    if got != expected:
        raise SystemExit(
            f"read {options.get('kafka.security.protocol')}: {got} rows, not {expected}"
        )
    return seconds


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    import secrets

    from bench.spark_workload import session

    results: dict[str, list[float]] = {}
    password = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="millrace-bench-secured-") as tmp:
        cluster = SecuredCluster(Path(tmp) / "cluster")
        spark = None
        try:
            prepare(cluster, args.partitions, args.records, password)
            spark = session()
            for case, _ in CASES:  # warm-up: Spark's JIT, the Python workers, the logins
                progress(f"warm-up: {case}")
                count(spark, read_options(cluster, case, password), args.records)
            for r in range(args.runs):
                order = list(CASES) if r % 2 == 0 else list(reversed(CASES))
                for case, _ in order:
                    progress(f"run {r + 1}/{args.runs}: {case}")
                    seconds = count(spark, read_options(cluster, case, password), args.records)
                    results.setdefault(case, []).append(args.records / seconds)
        finally:
            if spark is not None:
                spark.stop()
            cluster.stop()
    return results


def report(args: argparse.Namespace, results: dict[str, list[float]]) -> str:
    def med(case: str) -> float:
        return statistics.median(results[case])

    base = med("plaintext")
    lines = [
        HEADING,
        "",
        f"`python -m bench.secured_reads --records {args.records} --partitions "
        f"{args.partitions} --runs {args.runs}` (part of `make bench`), run "
        f"{datetime.date.today().isoformat()} at commit {commit()} on: {machine()}. One "
        "Millrace broker secured by `millrace cluster up --security sasl_ssl` (ACLs enforced) "
        "with a second, PLAINTEXT listener, so every read fetches the same log; local Spark "
        f'(`local[2]`); `spark.read.format("millrace")...count()` of {args.records:,} '
        f"records of 100 bytes in {args.partitions} partitions, as a user with READ and "
        "DESCRIBE ACLs (over SASL_SSL: Spark's option names, `kafka.sasl.jaas.config` and a "
        "PEM trust store); medians of "
        f"{args.runs} runs after a warm-up read of each, alternating the order.",
        "",
        "| read | rows/s | runs (rows/s) | vs PLAINTEXT |",
        "|---|---:|---|---:|",
    ]
    for case, label in CASES:
        runs = ", ".join(f"{v:,.0f}" for v in results[case])
        lines.append(f"| {label} | {med(case):,.0f} | {runs} | {med(case) / base:.2f}x |")
    lines += [
        "",
        "Over SASL_SSL each task's connections (the leader's, and the metadata look-up's) "
        "make a TLS handshake and a SCRAM login once, then fetch as over PLAINTEXT: the "
        "record batches are decrypted by OpenSSL and decoded into Arrow as before. Before, "
        "a secured read went through a librdkafka consumer per task (the last row).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = p.parse_args(argv)
    results = run(args)
    section = report(args, results)
    replace_section(Path(args.out), HEADING, section)
    sys.stderr.write(section + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
