"""Where end-to-end latency goes between the clients and the broker, read from the wire.

Workload 4 of ``bench.compare`` (a confluent-kafka producer at a fixed rate, ``acks=1``,
``linger.ms=0``, and a confluent-kafka consumer at the log end) gives one number per record;
this takes the same workload apart, Millrace beside Apache Kafka, from a ``tcpdump`` capture
of the loopback traffic to the broker's port while it runs. Each produced batch is followed
by its CRC (a batch's CRC covers everything the broker does not rewrite, so the batch in the
consumer's Fetch response carries the CRC the producer sent):

- **produce**: a Produce request's first packet to its response's first packet (matched by
  correlation id): the broker's receive, decode, append and answer, queueing included;
- **parked**: a batch whose consumer Fetch was already waiting at the broker when the
  Produce arrived: the Produce's packet to the last packet of the Fetch response carrying
  the batch (the consumer has the records only once that one arrived);
- **not parked**: a batch that arrived while no Fetch was waiting (the consumer was between
  a response and its next Fetch): it waits for that Fetch; ``share`` is their fraction;
- **turnaround**: the consumer's time from a Fetch response's first packet to its next
  Fetch request; and how many packets a response takes (Kafka writes the records with
  ``sendfile`` after the header, so its responses take more than one).

Needs ``tcpdump`` and the right to capture on ``lo`` (root, or CAP_NET_RAW): not installed
by ``make setup`` and not part of ``make bench``; ``apt-get install tcpdump``, then
``.venv/bin/python -m bench.latency_capture``. A Produce request is read from the packet it
starts in (a low-latency producer's requests are small); one that does not parse there is
counted as skipped. Output: Markdown on stdout and in ``--out``; progress on stderr.

Concurrency: the capture runs in a ``tcpdump`` child process beside the workload; the
analysis reads the finished capture file.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import statistics
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from bench import loadgen
from bench.basics import median_or_nan, progress
from bench.common import ROOT, commit, machine
from bench.compare import both, orders
from bench.systems import System
from broker.protocol import produce_codec
from broker.protocol.api_keys import ApiKey
from broker.protocol.framing import InvalidRequestError, parse_request_header, skip_tagged_fields
from broker.protocol.records import CorruptRecordError, iter_batches

_PCAP_HEADER = struct.Struct("<IHHiIII")
_PACKET_HEADER = struct.Struct("<IIII")
_MICRO, _NANO = 0xA1B2C3D4, 0xA1B23C4D
_LINK_HEADER = {
    1: 14,
    113: 16,
    0: 4,
}  # Ethernet (what tcpdump writes for lo), Linux cooked, BSD loopback
_API = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")
FLEXIBLE_PRODUCE = 9


class Packet(NamedTuple):
    time: float
    src_port: int
    dst_port: int
    payload: bytes


def read_pcap(data: bytes) -> Iterator[Packet]:
    """The TCP-over-IPv4 packets with a payload of a classic pcap file (micro- or nanosecond
    timestamps); others are left out. ValueError for a file that is not pcap."""
    if len(data) < _PCAP_HEADER.size:
        raise ValueError("not a pcap file: shorter than its header")
    magic, _major, _minor, _zone, _sigfigs, _snaplen, link = _PCAP_HEADER.unpack_from(data)
    if magic not in (_MICRO, _NANO):
        raise ValueError(f"not a little-endian pcap file (magic {magic:#x})")
    scale = 1e-9 if magic == _NANO else 1e-6
    skip = _LINK_HEADER.get(link)
    if skip is None:
        raise ValueError(f"link type {link} not supported")
    pos = _PCAP_HEADER.size
    while pos + _PACKET_HEADER.size <= len(data):
        sec, frac, captured, _length = _PACKET_HEADER.unpack_from(data, pos)
        pos += _PACKET_HEADER.size
        frame = data[pos : pos + captured]
        pos += captured
        ip = frame[skip:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:  # IPv4, TCP
            continue
        tcp = ip[(ip[0] & 0x0F) * 4 :]
        if len(tcp) < 20:
            continue
        src, dst = struct.unpack_from(">HH", tcp)
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if payload:
            yield Packet(sec + frac * scale, src, dst, payload)


def request_api(payload: bytes) -> int | None:
    """The API key of the request a packet starts with (None: too short to tell)."""
    return _API.unpack_from(payload, 4)[0] if len(payload) >= 8 else None


def produce_crcs(payload: bytes) -> tuple[int, list[bytes]] | None:
    """(correlation id, the CRCs of its batches) of the Produce request a packet starts with;
    None for another request or one that does not parse from this packet alone."""
    frame = payload[4:]
    try:
        header, pos = parse_request_header(frame)
        if header.api_key != ApiKey.PRODUCE:
            return None
        if header.api_version >= FLEXIBLE_PRODUCE:
            pos = skip_tagged_fields(frame, pos)
        request = produce_codec.decode_request(header.api_version, frame, pos)
        crcs = [
            batch.crc.to_bytes(4, "big")
            for topic in request.topic_data
            for part in topic.partition_data
            if (records := part.records) is not None
            for batch in iter_batches(records)
        ]
    except (InvalidRequestError, CorruptRecordError, struct.error, IndexError):
        return None
    return header.correlation_id, crcs


@dataclass
class Anatomy:
    """What one capture shows (microseconds)."""

    produce_us: list[float] = field(default_factory=list)
    parked_us: list[float] = field(default_factory=list)
    not_parked_us: list[float] = field(default_factory=list)
    turnaround_us: list[float] = field(default_factory=list)
    packets_per_response: list[int] = field(default_factory=list)
    skipped_produces: int = 0
    end_to_end_p50_us: float = float("nan")
    """What the consumer measured of the whole run (``loadgen.end_to_end``), for reference."""

    @property
    def not_parked_share(self) -> float:
        n = len(self.parked_us) + len(self.not_parked_us)
        return len(self.not_parked_us) / n if n else 0.0


def analyze(packets: list[Packet], port: int) -> Anatomy:
    """Take the traffic to and from the broker at ``port`` apart (see the module docstring).
    The consumer's connections are those that send Fetch requests, the producer's those
    that send Produce requests."""
    apis = [request_api(p.payload) if p.dst_port == port else None for p in packets]
    fetchers = {p.src_port for p, api in zip(packets, apis, strict=True) if api == 1}
    producers = {p.src_port for p, api in zip(packets, apis, strict=True) if api == 0}
    wire = _Wire()
    for p, api in zip(packets, apis, strict=True):
        if api == 1 and p.src_port in fetchers:
            wire.fetch_request(p)
        elif api == 0 and p.src_port in producers:
            wire.produce_request(p)
        elif p.src_port == port and p.dst_port in producers:
            wire.produce_response(p)
        elif p.src_port == port and p.dst_port in fetchers:
            wire.fetch_response(p)
    return wire.out


class _Wire:
    """The state of :func:`analyze`'s pass over the packets, in time order."""

    def __init__(self) -> None:
        self.out = Anatomy()
        self.sent: dict[tuple[int, int], float] = {}  # (producer port, correlation id) -> time
        self.waiting: list[tuple[bytes, float]] = []  # batches not yet in a fetch response
        self.fetch_at: float | None = None  # the last Fetch request's arrival
        self.answered_at: float | None = None  # the first packet of the response to it
        self.packets = 0  # packets of that response so far

    def fetch_request(self, p: Packet) -> None:
        if self.answered_at is not None:
            self.out.turnaround_us.append((p.time - self.answered_at) * 1e6)
            self.out.packets_per_response.append(self.packets)
        self.fetch_at, self.answered_at, self.packets = p.time, None, 0

    def produce_request(self, p: Packet) -> None:
        parsed = produce_crcs(p.payload)
        if parsed is None:
            self.out.skipped_produces += 1
            return
        self.sent[(p.src_port, parsed[0])] = p.time
        self.waiting += [(crc, p.time) for crc in parsed[1]]

    def produce_response(self, p: Packet) -> None:
        if len(p.payload) < 8:
            return
        started = self.sent.pop((p.dst_port, _CORRELATION.unpack_from(p.payload, 4)[0]), None)
        if started is not None:
            self.out.produce_us.append((p.time - started) * 1e6)

    def fetch_response(self, p: Packet) -> None:
        if self.answered_at is None:
            self.answered_at = p.time
        self.packets += 1
        kept = []
        for crc, produced in self.waiting:
            if crc not in p.payload:
                kept.append((crc, produced))
            elif self.fetch_at is not None and self.fetch_at < produced:
                self.out.parked_us.append((p.time - produced) * 1e6)
            else:
                self.out.not_parked_us.append((p.time - produced) * 1e6)
        self.waiting = kept


def capture(system: System, rate: int, seconds: float, capture_s: float, dump: Path) -> Anatomy:
    """Workload 4 against ``system`` for ``seconds`` after a 2 s warm-up, with ``capture_s``
    of it captured from the middle."""
    topic = f"latency-capture-{time.time_ns()}"
    system.create_topic(topic, 1, 1)
    port = int(system.bootstrap.rsplit(":", 1)[1])
    start_after = 2.0 + max(0.0, (seconds - capture_s) / 2)
    failure: list[str] = []

    def record() -> None:
        time.sleep(start_after)
        done = subprocess.run(
            [
                "timeout",
                "--signal=INT",
                str(capture_s),
                "tcpdump",
                "-i",
                "lo",
                "-w",
                str(dump),
                "-s",
                "65535",
                "-B",
                "65536",
                "tcp",
                "port",
                str(port),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if not dump.exists():
            failure.append(done.stderr.strip() or f"tcpdump exited {done.returncode}")

    recorder = threading.Thread(target=record, daemon=True)
    recorder.start()
    latency = loadgen.end_to_end(system.bootstrap, topic, rate, seconds, 2.0)
    recorder.join()
    if failure:
        raise SystemExit(f"tcpdump captured nothing: {failure[0]}")
    anatomy = analyze(list(read_pcap(dump.read_bytes())), port)
    anatomy.end_to_end_p50_us = latency.p50_ms * 1e3
    return anatomy


def report(results: dict[str, list[Anatomy]], args: argparse.Namespace) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    lines = [
        "# Where end-to-end latency goes, from the wire (`python -m bench.latency_capture`)",
        "",
        "Workload 4 of `bench.compare` (confluent-kafka producer at a fixed rate, `acks=1`, "
        "`linger.ms=0`; confluent-kafka consumer at the log end) taken apart from a `tcpdump` "
        "capture of the loopback traffic to the broker's port; each batch is followed by its "
        "CRC from the Produce request into the Fetch response. Columns: *end to end*, the "
        "consumer's p50 of the whole run; *produce*, a Produce request's first packet to its "
        "response's; *parked*, a batch's Produce packet to the last packet of the Fetch "
        "response carrying it, when that Fetch was already waiting; *not parked*, the same "
        "when no Fetch was waiting (the consumer was between a response and its next Fetch), "
        "and their *share*; *turnaround*, the consumer's first packet of a response to its "
        "next Fetch; *packets per response*; Produce requests that did not parse from their "
        "first packet, left out.",
        "",
        f"Run {stamp} UTC on {machine()}, commit {commit()}: {args.rate:,} records/s, "
        f"{args.rounds} round(s) per system alternating which goes first, {args.capture:g} s "
        "captured of each; medians over the rounds of each round's median, in microseconds.",
        "",
        "| system | end to end (p50) | produce | parked | not parked | share not parked "
        "| turnaround | packets per response | produces skipped |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rounds in results.items():

        def med(pick: str, runs: list[Anatomy] = rounds) -> float:
            return statistics.median(median_or_nan(getattr(r, pick)) for r in runs)

        share = statistics.median(r.not_parked_share for r in rounds)
        packets = statistics.median(
            median_or_nan([float(n) for n in r.packets_per_response]) for r in rounds
        )
        end_to_end = statistics.median(r.end_to_end_p50_us for r in rounds)
        lines.append(
            f"| {name} | {end_to_end:.0f} | {med('produce_us'):.0f} | {med('parked_us'):.0f} "
            f"| {med('not_parked_us'):.0f} | {share:.0%} | {med('turnaround_us'):.0f} "
            f"| {packets:g} | {sum(r.skipped_produces for r in rounds)} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=20_000, help="records/s")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per round")
    ap.add_argument("--capture", type=float, default=5.0, help="seconds captured per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm-up", type=int, default=300_000, help="records each system gets first")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "latency-capture.md")
    args = ap.parse_args(argv)
    if args.capture > args.seconds:
        ap.error(f"--capture {args.capture:g} is longer than --seconds {args.seconds:g}")
    return args


def main() -> None:
    args = parse_args()
    if shutil.which("tcpdump") is None:
        raise SystemExit(
            "bench.latency_capture needs tcpdump (apt-get install tcpdump) and the right to "
            "capture on lo (root or CAP_NET_RAW)"
        )
    results: dict[str, list[Anatomy]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="latency-capture-") as tmp,
        both(Path(tmp), 1, args.warm_up) as systems,
    ):
        for r, order in orders(systems, args.rounds):
            for system in order:
                progress(f"[capture] round {r + 1}/{args.rounds} {system.name}")
                dump = Path(tmp) / f"{system.name}-{r}.pcap"
                anatomy = capture(system, args.rate, args.seconds, args.capture, dump)
                results.setdefault(system.name, []).append(anatomy)
                dump.unlink()
    text = report(results, args)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
