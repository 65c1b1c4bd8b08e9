"""Fixtures for the integration tier: real ZooKeeper, real broker processes, real clients.

A cluster is started with ``millrace cluster up`` in a temporary directory on free loopback
ports and torn down with ``millrace cluster down``; whatever is still alive afterwards (a pid
from ``cluster.json``, or a process whose command line names the cluster's private
directory) is SIGKILLed by pid, so a failing test never leaks ZooKeeper or a broker.

Fixtures:

* ``cluster`` (module-scoped): one cluster per test module, single-broker unless the
  module's ``pytest.mark.cluster_config({...}, brokers=N)`` marker asks for N brokers.
  Broker properties come from the marker (passed as ``--set``).
* ``cluster_factory`` (function-scoped): ``cluster_factory({"k": "v"}, brokers=3,
  k_with_dots=...)`` starts an extra cluster with its own properties, torn down after the
  test.

Helpers: ``free_port()``, ``kafka_admin(bootstrap)`` (confluent-kafka AdminClient wrapper
that creates topics and waits for partition leaders), ``RawConnection`` (hand-built Kafka
requests on a plain socket, encoded with kio), ``wait_for(predicate, timeout_s, what)``, and
the ``Cluster`` object's methods. For multi-broker clusters: ``broker_address(id)``,
``describe(topic)`` ({partition: (leader, replicas, isr)}), ``describe_via(id, topic)`` (one
broker's own Metadata answer), ``wait_isr_complete``, ``pause_broker``/``resume_broker``
(SIGSTOP/SIGCONT by pid; ``down()`` resumes before stopping), ``controller_id()`` and
``zk_get(path)`` (kazoo).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "broker.cli.main"]
CLUSTER_UP_TIMEOUT_S = 180
CLUSTER_CMD_TIMEOUT_S = 120
READY_TIMEOUT_S = 90


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster_config(props=None, brokers=1, **props): broker count and properties (--set) "
        "for the module's cluster fixture; underscores in keyword names become dots",
    )


_ACTIVE_CLUSTERS: list[Cluster] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On failure, attach the tail of every running cluster's broker output to the report."""
    report = yield
    if report.failed:
        for c in list(_ACTIVE_CLUSTERS):
            for name, text in c.output_tails().items():
                report.sections.append((f"{c.dir.name} {name}", text))
    return report


# --- ports ---------------------------------------------------------------------------------

_handed_out: set[int] = set()


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1, never the same one twice in this session."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port found")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive free ports on 127.0.0.1 (none handed out before).

    Taken below the kernel's ephemeral range: a port in it that is free now can become the
    local port of some outgoing connection (a client of the cluster just started) before
    the broker binds it."""
    if count <= 1:
        return free_port()
    import random

    high = min(_ephemeral_low(), 65536) - count
    low = 10000 if high > 12000 else 1024
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(500):
        first = rng.randrange(low, high)
        ports = range(first, first + count)
        if all(p not in _handed_out and port_is_free(p) for p in ports):
            _handed_out.update(ports)
            return first
    raise RuntimeError(f"no {count} consecutive free ports found")


# --- waiting -------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], Any], timeout_s: float = 60.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; return that. Exceptions raised by
    the predicate count as "not yet" (a broker may be restarting). On timeout raise
    AssertionError naming ``what`` with the last value or exception seen."""
    deadline = time.monotonic() + timeout_s
    last: object = "never evaluated"
    while True:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - keep polling, report at the end
            value = None
            last = f"raised {exc!r}"
        else:
            if value:
                return value
            last = f"returned {value!r}"
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s:g}s (last: {last})")
        time.sleep(0.2)


# --- processes -----------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # state is the field after the parenthesised command name
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def wait_pid_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def kill_pid(pid: int) -> None:
    """SIGKILL one pid (ours) and wait for it to go."""
    if pid <= 1 or pid == os.getpid() or not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    wait_pid_gone(pid, 10)


def pids_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (a cluster's unique temporary directory)."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


# --- raw protocol ----------------------------------------------------------------------------


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    def uvarint(p: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result, p
            shift += 7

    count, pos = uvarint(pos)
    for _ in range(count):
        _tag, pos = uvarint(pos)
        size, pos = uvarint(pos)
        pos += size
    return pos


class RawConnection:
    """A plain-socket Kafka connection: hand-built frames and kio-encoded requests."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self._correlation = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _recv_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
            chunks += chunk
        return bytes(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    @staticmethod
    def header(
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str = "raw-test",
        *,
        flexible: bool = False,
    ) -> bytes:
        cid = client_id.encode()
        out = struct.pack(">hhih", api_key, api_version, correlation_id, len(cid)) + cid
        if flexible:
            out += b"\x00"  # request header v2: empty tagged fields
        return out

    def send_request(self, entity: Any) -> int:
        """Send a kio request entity (header v1, or v2 if flexible); return its correlation id."""
        from kio.serial import entity_writer

        correlation_id = self.next_correlation_id()
        body = io.BytesIO()
        entity_writer(type(entity))(body, entity)
        header = self.header(
            int(entity.__api_key__),
            int(entity.__version__),
            correlation_id,
            flexible=bool(entity.__flexible__),
        )
        self.send_frame(header + body.getvalue())
        return correlation_id

    def read_response(self, api_key: int, version: int) -> tuple[int, Any]:
        """Read one response frame; return (correlation id, decoded kio response entity)."""
        from kio.index import load_response_schema
        from kio.serial import entity_reader

        frame = self.recv_frame()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        pos = 4
        response_cls = load_response_schema(api_key, version)
        if response_cls.__flexible__ and api_key != 18:
            pos = _skip_tagged_fields(frame, pos)
        value, _size = entity_reader(response_cls)(frame, pos)
        return correlation_id, value

    def request(self, entity: Any) -> Any:
        """Send a kio request entity, return the decoded kio response entity."""
        sent = self.send_request(entity)
        got, value = self.read_response(int(entity.__api_key__), int(entity.__version__))
        assert got == sent, f"correlation id {got} != {sent}"
        return value

    def produce_v3(self, topic: str, partition: int, records: bytes, acks: int = 1) -> Any:
        """A hand-built Produce v3 for one partition; returns its PartitionProduceResponse."""
        import datetime

        from kio.schema.produce.v3.request import (
            PartitionProduceData,
            ProduceRequest,
            TopicProduceData,
        )
        from kio.schema.types import TopicName
        from kio.static.primitive import i16, i32, i32Timedelta

        resp = self.request(
            ProduceRequest(
                transactional_id=None,
                acks=i16(acks),
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                topic_data=(
                    TopicProduceData(
                        name=TopicName(topic),
                        partition_data=(
                            PartitionProduceData(index=i32(partition), records=records),
                        ),
                    ),
                ),
            )
        )
        [t] = resp.responses
        [pr] = t.partition_responses
        return pr

    def init_producer_id(self) -> tuple[int, int]:
        """InitProducerId v0 for an idempotent (non-transactional) producer: (id, epoch)."""
        import datetime

        from kio.schema.init_producer_id.v0.request import InitProducerIdRequest
        from kio.static.primitive import i32Timedelta

        resp = self.request(
            InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            )
        )
        assert int(resp.error_code) == 0, f"InitProducerId: {resp.error_code!r}"
        return int(resp.producer_id), int(resp.producer_epoch)

    def closed_by_peer(self, timeout_s: float = 30.0) -> bool | bytes:
        """Wait for the broker's reaction: True if it closed the connection, else the bytes
        it sent (b"" never: that is a close). Raises TimeoutError if it stays silent."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        if not data:
            return True
        return data


def api_versions_ok(host: str, port: int, timeout_s: float = 10.0) -> bool:
    """One ApiVersions v0 round trip on a fresh connection."""
    try:
        with RawConnection(host, port, timeout_s) as conn:
            conn.send_frame(RawConnection.header(18, 0, 1))
            frame = conn.recv_frame()
            corr, error = struct.unpack_from(">ih", frame, 0)
            return corr == 1 and error == 0
    except OSError:
        return False


# --- admin -----------------------------------------------------------------------------------


class KafkaAdmin:
    """confluent-kafka AdminClient plus the waits tests need."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.client = AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        replication_factor: int = 1,
    ) -> None:
        from confluent_kafka.admin import NewTopic

        futures = self.client.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    config=config or {},
                )
            ],
            operation_timeout=30,
            request_timeout=30,
        )
        futures[name].result(timeout=timeout_s)
        self.wait_for_leaders(name, partitions, timeout_s)

    def wait_for_leaders(self, name: str, partitions: int, timeout_s: float = 60.0) -> None:
        """Poll metadata until ``name`` has ``partitions`` partitions, each with a leader."""
        deadline = time.monotonic() + timeout_s
        last = "no metadata"
        while time.monotonic() < deadline:
            md = self.client.list_topics(topic=name, timeout=10)
            topic = md.topics.get(name)
            if topic is not None and topic.error is None:
                leaders = {p: pm.leader for p, pm in topic.partitions.items()}
                last = f"partitions/leaders {leaders}"
                if len(leaders) == partitions and all(
                    leader >= 0 and pm.error is None
                    for leader, pm in zip(leaders.values(), topic.partitions.values(), strict=True)
                ):
                    return
            elif topic is not None:
                last = f"topic error {topic.error}"
            time.sleep(0.2)
        raise AssertionError(
            f"topic {name!r}: metadata never showed a leader for all {partitions} partitions "
            f"within {timeout_s}s (last: {last})"
        )

    def topic_names(self) -> set[str]:
        return set(self.client.list_topics(timeout=10).topics)


def kafka_admin(bootstrap: str) -> KafkaAdmin:
    return KafkaAdmin(bootstrap)


# --- client helpers --------------------------------------------------------------------------


def confluent_conf(bootstrap: str, extra: dict[str, object] | None = None) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap}
    debug = os.environ.get("MILLRACE_CLIENT_DEBUG")
    if debug:
        conf["debug"] = debug
    conf.update(extra or {})
    return conf


def confluent_consume(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    start: int | None = None,
    extra: dict[str, object] | None = None,
    timeout_s: float = 90.0,
) -> dict[int, list[Any]]:
    """Read every partition from ``start`` (default: beginning) up to its current high
    watermark with a confluent-kafka Consumer using assign() (no group membership).
    Raises AssertionError on a message error or if a partition does not reach its high
    watermark in time."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    first = OFFSET_BEGINNING if start is None else start
    conf = confluent_conf(
        bootstrap,
        {
            "group.id": f"itest-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            **(extra or {}),
        },
    )
    consumer = Consumer(conf)
    try:
        high = {}
        for p in partitions:
            _low, hw = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            high[p] = hw
        pending = {p for p in partitions if high[p] > max(first, 0)}
        out: dict[int, list[Any]] = {p: [] for p in partitions}
        if not pending:
            return out
        consumer.assign([TopicPartition(topic, p, first) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(
                        f"consumer error on {msg.topic()}[{msg.partition()}]: {err}"
                    )
                p = msg.partition()
                out[p].append(msg)
                if msg.offset() + 1 >= high[p]:
                    pending.discard(p)
        assert not pending, (
            f"{topic}: partitions {sorted(pending)} not read up to their high watermarks "
            f"{ {p: high[p] for p in pending} } within {timeout_s}s; got "
            f"{ {p: len(out[p]) for p in pending} } records"
        )
        return out
    finally:
        consumer.close()


def read_log_batches(partition_dir: Path) -> list[tuple[Path, Any, bool]]:
    """Batch headers of every ``.log`` segment in ``partition_dir``: (file, header, crc_ok)."""
    from broker.protocol import records

    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        for header in records.iter_batches(data, allow_partial_tail=True):
            out.append((seg, header, records.crc_ok(data, header)))
    return out


# --- cluster -------------------------------------------------------------------------------


def _prop_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def merge_props(props: dict[str, object] | None, kwargs: dict[str, object]) -> dict[str, str]:
    merged = {k: _prop_value(v) for k, v in (props or {}).items()}
    merged.update({k.replace("_", "."): _prop_value(v) for k, v in kwargs.items()})
    return merged


PartitionView = tuple[int, tuple[int, ...], tuple[int, ...]]
"""One partition as ``describe`` returns it: (leader, replicas, isr); leader -1 when none."""


def batch_signature(batches: list[tuple[Path, Any, bool]]) -> list[tuple[int, int, int, int]]:
    """(base_offset, last_offset, partitionLeaderEpoch, crc) of each batch: two replicas of a
    partition hold identical logs when these lists are equal (segment boundaries aside)."""
    return [
        (h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc) for _seg, h, _ok in batches
    ]


class Cluster:
    """One ``millrace cluster up`` cluster (brokers 1..N) in its own directory."""

    def __init__(self, directory: Path, props: dict[str, str], brokers: int = 1) -> None:
        self.dir = directory
        self.props = props
        self.brokers = brokers
        self.json: dict[str, Any] = {}
        self.bootstrap = ""
        self._pids_seen: set[int] = set()
        self._paused: set[int] = set()
        self._cmd_no = 0
        self._admin: KafkaAdmin | None = None

    wait_for = staticmethod(wait_for)  # the module's wait_for, so tests need no import

    # -- commands --

    def _cli(self, *args: str, timeout_s: float = CLUSTER_CMD_TIMEOUT_S) -> tuple[int, str, str]:
        """Run ``millrace ARGS`` with stdout/stderr to files (so background children that
        inherit them cannot block us), return (rc, stdout, stderr)."""
        self._cmd_no += 1
        out_path = self.dir / f"cmd-{self._cmd_no}-{args[1]}.out"
        err_path = self.dir / f"cmd-{self._cmd_no}-{args[1]}.err"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [*CLI, *args],
                cwd=self.dir,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
            )
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_pid(proc.pid)
                proc.wait()
                rc = -999
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        self.reload()
        return rc, stdout, stderr

    def cli(self, *args: str, timeout_s: float = CLUSTER_CMD_TIMEOUT_S) -> str:
        """Run ``millrace ARGS`` (any subcommand) in the cluster directory; assert exit code 0
        and return stdout."""
        rc, stdout, stderr = self._cli(*args, timeout_s=timeout_s)
        self._check(" ".join(args[:2]), rc, stdout, stderr)
        return stdout

    def _check(self, what: str, rc: int, stdout: str, stderr: str) -> None:
        if rc != 0:
            listing = "\n".join(
                str(p.relative_to(self.dir)) for p in sorted(self.dir.rglob("*"))[:80]
            )
            raise AssertionError(
                f"`millrace {what}` failed (rc={rc}{', timed out' if rc == -999 else ''})\n"
                f"--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-5000:]}\n"
                f"--- files in {self.dir} ---\n{listing}"
            )

    def reload(self) -> None:
        path = self.dir / "cluster.json"
        if path.exists():
            with contextlib.suppress(ValueError, OSError):
                self.json = json.loads(path.read_text())
        self._pids_seen.update(self.pids())

    def pids(self) -> list[int]:
        out = []
        if isinstance(self.json.get("zookeeper_pid"), int):
            out.append(self.json["zookeeper_pid"])
        for b in self.json.get("brokers", []):
            if isinstance(b.get("pid"), int):
                out.append(b["pid"])
        return out

    def up(self) -> None:
        zk_port = free_port()
        base_port = free_port_range(self.brokers)
        args = [
            "cluster",
            "up",
            "--dir",
            str(self.dir),
            "--brokers",
            str(self.brokers),
            "--base-port",
            str(base_port),
            "--zk-port",
            str(zk_port),
        ]
        for key, value in self.props.items():
            args += ["--set", f"{key}={value}"]
        rc, stdout, stderr = self._cli(*args, timeout_s=CLUSTER_UP_TIMEOUT_S)
        self._check("cluster up", rc, stdout, stderr)
        assert self.json, f"cluster up succeeded but wrote no {self.dir}/cluster.json"
        self.bootstrap = self.json["bootstrap_servers"]
        lines = stdout.strip().splitlines()
        assert lines and lines[-1].strip() == self.bootstrap, (
            f"cluster up's last stdout line {lines[-1:]!r} is not the bootstrap servers "
            f"{self.bootstrap!r}"
        )
        expected = ",".join(f"127.0.0.1:{base_port + i}" for i in range(self.brokers))
        assert self.bootstrap == expected, self.bootstrap
        assert self.broker_ids() == list(range(1, self.brokers + 1)), self.json.get("brokers")
        self.wait_ready()

    def down(self) -> None:
        """``cluster down``, then SIGKILL anything of ours still alive. Never raises."""
        errors = []
        for broker_id in sorted(self._paused):
            # a stopped process would sit out cluster down's SIGTERM grace period
            with contextlib.suppress(Exception):
                self.resume_broker(broker_id)
        try:
            rc, _stdout, stderr = self._cli("cluster", "down", "--dir", str(self.dir))
            if rc != 0:
                errors.append(f"cluster down rc={rc}: {stderr[-2000:]}")
        except Exception as exc:  # noqa: BLE001 - teardown must go on
            errors.append(repr(exc))
        leftovers = {p for p in self._pids_seen | set(self.pids()) if pid_alive(p)}
        leftovers.update(pids_mentioning(str(self.dir)))
        for pid in sorted(leftovers):
            kill_pid(pid)
        self._admin = None
        if self in _ACTIVE_CLUSTERS:
            _ACTIVE_CLUSTERS.remove(self)
        if errors:
            sys.stderr.write(f"[integration teardown {self.dir}] {'; '.join(errors)}\n")

    def output_tails(self, lines: int = 60) -> dict[str, str]:
        """The last ``lines`` lines of each broker's output file (cluster.json ``out``)."""
        out = {}
        for b in self.json.get("brokers", []):
            path = b.get("out")
            if path and Path(path).exists():
                text = Path(path).read_text(errors="replace").splitlines()[-lines:]
                out[f"broker-{b.get('id')} output"] = "\n".join(text)
        return out

    # -- brokers --

    def broker(self, broker_id: int = 1) -> dict[str, Any]:
        for b in self.json.get("brokers", []):
            if b.get("id") == broker_id:
                return b  # type: ignore[no-any-return]
        raise KeyError(f"broker {broker_id} not in {self.dir}/cluster.json: {self.json}")

    def broker_ids(self) -> list[int]:
        """Every broker id of cluster.json, running or not."""
        return sorted(int(b["id"]) for b in self.json.get("brokers", []))

    def running_ids(self) -> list[int]:
        """Brokers whose cluster.json pid is alive (paused ones included)."""
        return [
            b
            for b in self.broker_ids()
            if isinstance(self.broker(b).get("pid"), int) and pid_alive(self.broker_pid(b))
        ]

    def serving_ids(self) -> list[int]:
        """Running brokers that are not paused."""
        return [b for b in self.running_ids() if b not in self._paused]

    @property
    def host(self) -> str:
        return str(self.broker(1)["host"])

    @property
    def port(self) -> int:
        return int(self.broker(1)["port"])

    def broker_address(self, broker_id: int = 1) -> str:
        """``host:port`` of one broker (usable as a single-broker bootstrap)."""
        b = self.broker(broker_id)
        return f"{b['host']}:{b['port']}"

    def broker_pid(self, broker_id: int = 1) -> int:
        return int(self.broker(broker_id)["pid"])

    def stop_broker(self, hard: bool = False, broker_id: int = 1) -> None:
        old_pid = self.broker_pid(broker_id)
        args = ["cluster", "stop-broker", "--dir", str(self.dir), "--broker", str(broker_id)]
        if hard:
            args.append("--hard")
        rc, stdout, stderr = self._cli(*args)
        self._check(" ".join(args[:2]) + (" --hard" if hard else ""), rc, stdout, stderr)
        assert wait_pid_gone(old_pid, 60), (
            f"broker {broker_id} (pid {old_pid}) still alive 60s after "
            f"`cluster stop-broker{' --hard' if hard else ''}`"
        )
        self._paused.discard(broker_id)

    def start_broker(self, broker_id: int = 1) -> None:
        args = ["cluster", "start-broker", "--dir", str(self.dir), "--broker", str(broker_id)]
        rc, stdout, stderr = self._cli(*args)
        self._check("cluster start-broker", rc, stdout, stderr)
        pid = self.broker_pid(broker_id)
        assert pid_alive(pid), f"broker {broker_id} pid {pid} from cluster.json is not running"
        self.wait_ready()

    def ensure_running(self, broker_id: int = 1) -> None:
        """Restart a broker if an earlier (failed) test left it stopped or paused."""
        self.reload()
        if broker_id in self._paused:
            self.resume_broker(broker_id)
        pid = self.broker(broker_id).get("pid")
        if not isinstance(pid, int) or not pid_alive(pid):
            self.start_broker(broker_id)

    def ensure_all_running(self) -> None:
        """Every broker of cluster.json running, unpaused and ready."""
        for broker_id in self.broker_ids():
            self.ensure_running(broker_id)
        self.wait_ready()

    def pause_broker(self, broker_id: int) -> None:
        """SIGSTOP one broker by pid (its sockets stay open, it answers nothing). Pair with
        ``resume_broker`` in a ``finally`` or use ``paused()``; ``down()`` resumes too."""
        pid = self.broker_pid(broker_id)
        self._paused.add(broker_id)
        os.kill(pid, signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        """SIGCONT a broker paused by ``pause_broker``."""
        self._paused.discard(broker_id)
        pid = self.broker(broker_id).get("pid")
        if isinstance(pid, int) and pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self, *broker_ids: int) -> Iterator[None]:
        """SIGSTOP ``broker_ids`` for the block; always SIGCONT them afterwards."""
        try:
            for b in broker_ids:
                self.pause_broker(b)
            yield
        finally:
            for b in broker_ids:
                self.resume_broker(b)

    def raw_metadata(
        self, broker_id: int = 1, topics: list[str] | None = None, timeout_s: float = 10.0
    ) -> Any:
        """One Metadata v1 request to ``broker_id`` itself (not whichever broker a client
        picks); ``topics`` None asks for every topic. Returns the kio MetadataResponse."""
        from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        request = MetadataRequest(
            topics=None
            if topics is None
            else tuple(MetadataRequestTopic(name=TopicName(t)) for t in topics)
        )
        with self.raw(timeout_s, broker_id=broker_id) as conn:
            return conn.request(request)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every running broker of cluster.json answers ApiVersions and its own Metadata
        response lists every running broker."""
        deadline = time.monotonic() + timeout_s
        last = "no broker checked"
        while time.monotonic() < deadline:
            self.reload()
            running = [b for b in self.running_ids() if b not in self._paused]
            ok = True
            for b in running:
                host, port = self.broker(b)["host"], int(self.broker(b)["port"])
                if not api_versions_ok(host, port):
                    ok, last = False, f"broker {b} does not answer ApiVersions"
                    break
                try:
                    listed = {int(n.node_id) for n in self.raw_metadata(b, [], 5).brokers}
                except Exception as exc:  # noqa: BLE001 - keep polling
                    ok, last = False, f"Metadata from broker {b}: {exc!r}"
                    break
                if not set(running) <= listed:
                    ok, last = False, f"broker {b} lists brokers {sorted(listed)}, not {running}"
                    break
            if ok and running:
                return
            if not running:
                last = "no broker running"
            time.sleep(0.25)
        raise AssertionError(
            f"cluster at {self.bootstrap} not ready within {timeout_s}s (last: {last})"
        )

    # -- cluster state --

    def describe(self, topic: str, via: int | None = None) -> dict[int, PartitionView]:
        """{partition: (leader, replicas, isr)} of ``topic``: from the confluent-kafka
        AdminClient's Metadata (``list_topics``), or from broker ``via``'s own Metadata
        response. While a broker is paused, a serving broker is asked directly (a client could
        pick the paused one and hang). Raises LookupError if the topic is unknown."""
        if via is None and self._paused:
            via = self.serving_ids()[0]
        if via is not None:
            return self.describe_via(via, topic)
        md = self.admin().client.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            raise LookupError(f"topic {topic!r}: {t.error if t is not None else 'not listed'}")
        return {
            p: (pm.leader, tuple(pm.replicas), tuple(pm.isrs))
            for p, pm in sorted(t.partitions.items())
        }

    def describe_via(self, broker_id: int, topic: str) -> dict[int, PartitionView]:
        """``describe`` as broker ``broker_id`` answers Metadata itself."""
        resp = self.raw_metadata(broker_id, [topic])
        [t] = resp.topics
        if int(t.error_code) != 0:
            raise LookupError(f"topic {topic!r} on broker {broker_id}: {t.error_code!r}")
        return {
            int(p.partition_index): (
                int(p.leader_id),
                tuple(int(r) for r in p.replica_nodes),
                tuple(int(r) for r in p.isr_nodes),
            )
            for p in sorted(t.partitions, key=lambda p: int(p.partition_index))
        }

    def wait_isr_complete(
        self,
        topic: str,
        timeout_s: float = 60.0,
        brokers: list[int] | None = None,
        via: int | None = None,
    ) -> dict[int, PartitionView]:
        """Until every partition of ``topic`` has a leader and ISR == replicas (and, if
        ``brokers`` is given, replicas == that set). Returns the final description."""

        def check() -> dict[int, PartitionView] | None:
            d = self.describe(topic, via)
            for leader, replicas, isr in d.values():
                if leader < 0 or sorted(isr) != sorted(replicas):
                    return None
                if brokers is not None and sorted(replicas) != sorted(brokers):
                    return None
            return d or None

        return wait_for(check, timeout_s, f"{topic}: every partition led, with ISR == replicas")

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The current leader of one partition (waits until there is one)."""
        return int(
            wait_for(
                lambda: (
                    self.describe(topic)[partition][0] >= 0 and self.describe(topic)[partition][0]
                ),
                60,
                f"a leader for {topic}[{partition}]",
            )
        )

    def controller_id(self, via: int | None = None) -> int:
        """The active controller as broker ``via`` (default: the first serving broker)
        reports it in Metadata; -1 if none is known."""
        if via is None:
            via = self.serving_ids()[0]
        return int(self.raw_metadata(via, []).controller_id)

    def zk_get(self, path: str) -> bytes | None:
        """The data of one znode (kazoo, a short session to cluster.json's ZooKeeper)."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        zk = KazooClient(hosts=str(self.json["zookeeper"]), timeout=10.0)
        zk.start(timeout=15)
        try:
            data, _stat = zk.get(path)
            return bytes(data) if data is not None else b""
        except NoNodeError:
            return None
        finally:
            zk.stop()
            zk.close()

    def controller_epoch(self) -> int:
        """``/controller_epoch`` from ZooKeeper."""
        data = self.zk_get("/controller_epoch")
        assert data is not None, "/controller_epoch does not exist in ZooKeeper"
        return int(data.decode())

    # -- files --

    def log_dirs(self, broker_id: int = 1) -> list[Path]:
        out = []
        for d in self.broker(broker_id).get("log_dirs", []):
            p = Path(d)
            out.append(p if p.is_absolute() else self.dir / p)
        return out

    def log_dir(self, topic: str, partition: int, broker_id: int = 1) -> Path:
        """The ``<topic>-<partition>`` directory (in whichever log dir holds it)."""
        candidates = [d / f"{topic}-{partition}" for d in self.log_dirs(broker_id)]
        for c in candidates:
            if c.is_dir():
                return c
        return candidates[0]

    def segment_files(self, topic: str, partition: int, broker_id: int = 1) -> list[Path]:
        return sorted(self.log_dir(topic, partition, broker_id).glob("*.log"))

    def active_segment(self, topic: str, partition: int) -> Path:
        segs = self.segment_files(topic, partition)
        assert segs, f"no .log segment in {self.log_dir(topic, partition)}"
        return segs[-1]

    # -- clients --

    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = kafka_admin(self.bootstrap)
        return self._admin

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: dict[str, str] | None = None,
        replication_factor: int = 1,
    ) -> str:
        self.admin().create_topic(name, partitions, config, replication_factor=replication_factor)
        return name

    def raw(self, timeout_s: float = 30.0, broker_id: int = 1) -> RawConnection:
        b = self.broker(broker_id)
        return RawConnection(str(b["host"]), int(b["port"]), timeout_s)

    def conf(self, extra: dict[str, object] | None = None) -> dict[str, object]:
        """A confluent-kafka config for this cluster (MILLRACE_CLIENT_DEBUG adds ``debug``)."""
        return confluent_conf(self.bootstrap, extra)

    def consume(
        self,
        topic: str,
        partitions: list[int],
        start: int | None = None,
        extra: dict[str, object] | None = None,
        timeout_s: float = 90.0,
    ) -> dict[int, list[Any]]:
        """``confluent_consume`` against this cluster."""
        return confluent_consume(self.bootstrap, topic, partitions, start, extra, timeout_s)

    def batches(
        self, topic: str, partition: int, broker_id: int = 1
    ) -> list[tuple[Path, Any, bool]]:
        """Every batch header in the partition's segments on one broker:
        (segment, header, crc_ok)."""
        return read_log_batches(self.log_dir(topic, partition, broker_id))

    def replica_signatures(
        self, topic: str, partition: int, brokers: list[int]
    ) -> dict[int, list[tuple[int, int, int, int]]]:
        """``batch_signature`` of the partition's log on each of ``brokers``."""
        return {b: batch_signature(self.batches(topic, partition, b)) for b in brokers}

    def wait_replicas_identical(
        self, topic: str, partition: int, brokers: list[int], timeout_s: float = 60.0
    ) -> list[tuple[int, int, int, int]]:
        """Until the data files of ``brokers`` hold identical batches for the partition (and
        at least one); returns the common batch list."""

        def check() -> list[tuple[int, int, int, int]] | None:
            sigs = self.replica_signatures(topic, partition, brokers)
            first = sigs[brokers[0]]
            if first and all(s == first for s in sigs.values()):
                return first
            return None

        try:
            return wait_for(check, timeout_s, f"{topic}[{partition}]: identical logs on {brokers}")
        except AssertionError:
            sigs = self.replica_signatures(topic, partition, brokers)
            detail = "\n".join(
                f"broker {b}: {len(s)} batches, last 5 {s[-5:]}" for b, s in sigs.items()
            )
            raise AssertionError(
                f"{topic}[{partition}]: replica logs differ after {timeout_s:g}s\n{detail}"
            ) from None


def _start(directory: Path, props: dict[str, str], brokers: int = 1) -> Cluster:
    cluster = Cluster(directory, props, brokers)
    try:
        cluster.up()
    except BaseException:
        cluster.down()
        raise
    _ACTIVE_CLUSTERS.append(cluster)
    return cluster


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    props: dict[str, str] = {}
    brokers = 1
    for marker in reversed(list(request.node.iter_markers("cluster_config"))):
        kwargs = dict(marker.kwargs)
        brokers = int(kwargs.pop("brokers", brokers))
        props.update(merge_props(marker.args[0] if marker.args else None, kwargs))
    c = _start(tmp_path_factory.mktemp("cluster"), props, brokers)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def cluster_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def factory(
        props: dict[str, object] | None = None, brokers: int = 1, **kwargs: object
    ) -> Cluster:
        c = _start(tmp_path_factory.mktemp("cluster"), merge_props(props, kwargs), brokers)
        started.append(c)
        return c

    try:
        yield factory
    finally:
        for c in started:
            c.down()


# --- small shared helpers (exposed as fixtures so test modules need no imports) -------------


def unique_topic(request: pytest.FixtureRequest, suffix: str = "") -> str:
    """A topic name derived from the test id: legal characters only, short enough."""
    name = request.node.name
    for ch in "[]/ :,=":
        name = name.replace(ch, "-")
    name = name.removeprefix("test_").strip("-")[:180]
    return f"{name}{suffix}"


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return unique_topic(request)
