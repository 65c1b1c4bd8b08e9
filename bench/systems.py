"""The two systems under test, started the same way for every workload.

* :class:`MillraceSystem`: ``millrace cluster up --brokers N`` (its embedded ZooKeeper, one
  Python process per broker).
* :class:`KafkaSystem`: Apache Kafka 3.9.1 (ZooKeeper mode), one JVM per broker, started from
  the jars ``make setup`` fetched into ``.cache/jvm/kafka-dist`` exactly as Kafka's
  ``bin/kafka-server-start.sh`` starts it (``kafka.Kafka server.properties`` with the
  script's default heap ``-Xmx1G -Xms1G`` and G1 options), against the *same* embedded
  ZooKeeper as Millrace under the chroot ``/apache-kafka``.

Both get equivalent settings: listeners on 127.0.0.1, log dirs on the same disk (under one
temporary directory), no fsync per message (both systems' default), Kafka's defaults for
everything else, plus :func:`shared_settings` on both and whatever broker ``settings`` a
workload adds (the same on both). Each system reports its broker pids (for CPU and RSS), its
bootstrap servers, its data directories and each broker's home (Millrace's ``broker.out``,
Kafka's ``kafka.out`` and any log4j file a workload's ``log4j`` configuration writes under
``${kafka.logs.dir}``).

Concurrency: used from the benchmark's main thread only; processes are stopped by their own
pids (SIGTERM, controlled shutdown, then SIGKILL after a grace period).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import ROOT, free_port, millrace, start_cluster

KAFKA_VERSION = "3.9.1"
KAFKA_JARS = ROOT / ".cache" / "jvm" / "kafka-dist"
KAFKA_HEAP = ("-Xmx1G", "-Xms1G")
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
KAFKA_JVM_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
LOG4J = """log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def shared_settings(brokers: int) -> dict[str, str]:
    """Broker settings both systems get (everything else: each system's defaults, which are
    Kafka's). The initial rebalance delay is 0 so consumer-group workloads measure data, not
    the 3 s wait; internal topics are replicated to at most the brokers there are."""
    return {
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.replication.factor": str(min(3, brokers)),
    }


def kafka_available() -> bool:
    return any(KAFKA_JARS.glob(f"kafka_2.13-{KAFKA_VERSION}.jar"))


@dataclass
class System:
    """A running cluster of one kind."""

    name: str
    brokers: int
    bootstrap: str = ""
    pids: list[int] = field(default_factory=list)
    data_dirs: list[Path] = field(default_factory=list)
    homes: list[Path] = field(default_factory=list)

    def admin(self) -> AdminClient:
        # socket.timeout.ms: librdkafka gives up on any request in flight after it (60 s by
        # default, 300 s at most), whatever the admin call's own timeout; creating 10,000
        # partitions with RF=3 (bench.scale_partitions) takes longer than 60 s on 2 cores.
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 300_000})

    def create_topic(
        self,
        topic: str,
        partitions: int = 1,
        replication: int = 1,
        configs: dict[str, str] | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        """Create ``topic`` and wait until every partition has a leader in Metadata."""
        admin = self.admin()
        futures = admin.create_topics(
            [NewTopic(topic, partitions, replication, config=configs or {})],
            operation_timeout=timeout_s,
            request_timeout=timeout_s,
        )
        futures[topic].result(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=30)
            t = md.topics.get(topic)
            if (
                t is not None
                and t.error is None
                and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())
            ):
                return
            time.sleep(0.2)
        raise SystemExit(f"{self.name}: {topic} has no leaders after {timeout_s:g}s")

    def delete_topic(self, topic: str, timeout_s: float = 120.0) -> None:
        admin = self.admin()  # referenced until the result arrives (a collected client cancels)
        admin.delete_topics([topic], operation_timeout=timeout_s)[topic].result(timeout_s)

    def stored_bytes(self) -> int:
        total = 0
        for d in self.data_dirs:
            for root, _dirs, files in os.walk(d):
                for f in files:
                    try:
                        total += os.stat(os.path.join(root, f)).st_blocks * 512
                    except FileNotFoundError:
                        pass
        return total

    def stop(self) -> None:
        raise NotImplementedError


class MillraceSystem(System):
    """``millrace cluster up`` in ``directory``; :attr:`zk_connect` is its ZooKeeper."""

    def __init__(
        self,
        directory: Path,
        brokers: int,
        settings: dict[str, str] | None = None,
        ssl: dict[str, str] | None = None,
    ) -> None:
        """``ssl``: TLS settings of a second, SSL listener (one broker), at
        :attr:`ssl_bootstrap`."""
        super().__init__(name="Millrace", brokers=brokers)
        self.directory = directory
        ssl_port = free_port() if ssl is not None else None
        self.bootstrap = start_cluster(
            directory,
            brokers,
            {**shared_settings(brokers), **(settings or {}), **(ssl or {})},
            ssl_port=ssl_port,
        )
        self.ssl_bootstrap = f"127.0.0.1:{ssl_port}" if ssl_port else ""
        info = json.loads((directory / "cluster.json").read_text())
        self.zk_connect = str(info["zookeeper"])
        self.pids = [int(b["pid"]) for b in info["brokers"]]
        self.data_dirs = [Path(d) for b in info["brokers"] for d in b["log_dirs"]]
        self.homes = [Path(b["out"]).parent for b in info["brokers"]]

    def stop(self) -> None:
        millrace("cluster", "down", "--dir", str(self.directory))


class KafkaSystem(System):
    """Apache Kafka brokers 0..N-1 on free 127.0.0.1 ports, ZooKeeper ``zk_connect`` with
    the chroot ``/apache-kafka``; configs and logs under ``directory``, broker ``settings``
    on top of the shared ones, the log4j configuration ``log4j``."""

    def __init__(
        self,
        directory: Path,
        brokers: int,
        zk_connect: str,
        settings: dict[str, str] | None = None,
        log4j: str = LOG4J,
        ssl: dict[str, str] | None = None,
    ) -> None:
        """``ssl``: TLS settings of a second, SSL listener on every broker; the SSL
        addresses are :attr:`ssl_bootstrap`."""
        super().__init__(name="Kafka", brokers=brokers)
        self.ssl = dict(ssl) if ssl is not None else None
        self.ssl_addresses: list[str] = []
        if not kafka_available():
            raise SystemExit(f"Apache Kafka {KAFKA_VERSION} is not in {KAFKA_JARS}: run make setup")
        self.directory = directory
        self.settings = dict(settings or {})
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "log4j.properties").write_text(log4j)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._zk = zk_connect + "/apache-kafka"
        ports = [free_port() for _ in range(brokers)]
        self._ports = ports
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        try:
            for i, port in enumerate(ports):
                self._start(i, port, zk_connect + "/apache-kafka")
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _start(self, broker_id: int, port: int, zk: str) -> None:
        home = self.directory / f"broker-{broker_id}"
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        listeners = f"PLAINTEXT://127.0.0.1:{port}"
        tls: dict[str, str] = {}
        if self.ssl is not None:
            ssl_port = free_port()
            self.ssl_addresses.append(f"127.0.0.1:{ssl_port}")
            listeners += f",SSL://127.0.0.1:{ssl_port}"
            tls = {**self.ssl, "inter.broker.listener.name": "PLAINTEXT"}
        props = {
            "broker.id": str(broker_id),
            "listeners": listeners,
            "log.dirs": str(data),
            "zookeeper.connect": zk,
            "transaction.state.log.replication.factor": str(min(3, self.brokers)),
            "transaction.state.log.min.isr": str(min(2, self.brokers)),
            **shared_settings(self.brokers),
            **self.settings,
            **tls,
        }
        config = home / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        out = (home / "kafka.out").open("wb")
        cmd = [
            "java",
            *KAFKA_HEAP,
            *KAFKA_JVM_OPTS,
            f"-Dlog4j.configuration=file:{self.directory / 'log4j.properties'}",
            f"-Dkafka.logs.dir={home}",
            "-cp",
            f"{KAFKA_JARS}/*",
            "kafka.Kafka",
            str(config),
        ]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self._procs.append(proc)
        self.pids.append(proc.pid)
        self.data_dirs.append(data)
        self.homes.append(home)

    def restart(self, broker_id: int, timeout_s: float = 120.0) -> None:
        """Start broker ``broker_id`` again (after it was killed) with the same settings and
        data; returns once it listens and is registered (the cluster shows every broker)."""
        dead = self._procs[broker_id]
        if dead.poll() is None:
            raise RuntimeError(f"Kafka broker {broker_id} (pid {dead.pid}) is still running")
        procs, pids = list(self._procs), list(self.pids)
        data_dirs, homes = list(self.data_dirs), list(self.homes)
        self._start(broker_id, self._ports[broker_id], self._zk)
        procs[broker_id], pids[broker_id] = self._procs[-1], self.pids[-1]
        self._procs, self.pids, self.data_dirs, self.homes = procs, pids, data_dirs, homes
        self._wait_ready(timeout_s)

    @property
    def ssl_bootstrap(self) -> str:
        return ",".join(self.ssl_addresses)

    def _wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        for address in self.bootstrap.split(","):  # listening first: the client logs refusals
            host, port = address.rsplit(":", 1)
            while not _accepts(host, int(port)):
                self._check_alive()
                if time.monotonic() > deadline:
                    raise SystemExit(f"Kafka did not listen on {address} within {timeout_s:g}s")
                time.sleep(0.2)
        admin = self.admin()
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                md = admin.list_topics(timeout=5)
                if len(md.brokers) == self.brokers and md.controller_id >= 0:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.5)
        raise SystemExit(f"Kafka did not start within {timeout_s:g}s")

    def _check_alive(self) -> None:
        for proc in self._procs:
            if proc.poll() is not None:
                raise SystemExit(
                    f"Kafka broker pid {proc.pid} exited ({proc.returncode}); see "
                    f"{self.directory}/broker-*/kafka.out"
                )

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def java_tool(main_class: str, *args: str, timeout_s: float = 1800.0) -> str:
    """Run one of Kafka's own command-line tools (as its ``bin/kafka-*.sh`` script would) and
    return its stdout; exits the benchmark with the tool's output if it fails."""
    log4j = ROOT / ".cache" / "jvm" / "tools-log4j.properties"
    if not log4j.exists():
        log4j.write_text(LOG4J + "log4j.appender.stdout.Target=System.err\n")
    cmd = [
        "java",
        "-Xmx512M",
        f"-Dlog4j.configuration=file:{log4j}",
        "-cp",
        f"{KAFKA_JARS}/*",
        main_class,
        *args,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-4000:] + out.stderr[-4000:])
        raise SystemExit(f"{main_class} failed with exit code {out.returncode}")
    return out.stdout
