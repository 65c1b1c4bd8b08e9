"""Send fuzzed requests to a real broker over several pipelined connections and check the
invariants after each one.

Theory of operation. ``connections`` asyncio workers each own a seeded ``random.Random``
(seed, worker index) and a socket. A worker writes a window of up to ``window`` requests in
one write (a window ends early after a request that is likely to close the connection, so
few requests are lost behind a close), then reads the answers in order. Correlation ids are
per connection and increasing, so every response is matched to its request:

* a response must carry the correlation id of the oldest unanswered request (a Produce with
  acks=0 owes none and is skipped) and decode completely with kio's response class for the
  request's (api key, version); for an unsupported version it must be UNSUPPORTED_VERSION;
  for a Produce with hostile batches each partition's error code must be one Kafka answers
  that batch with;
* a closed connection is allowed after a request that does not follow the schema; after one
  that does (``Generated.valid``), it is a failure (the broker could parse it, so it owed an
  answer), except for a Produce with acks=0 and frames over ``socket.request.max.bytes``;
* no answer within ``timeout_s`` is a failure (a hang);
* a window also stops at about ``max_request_bytes`` of requests, so the broker holds at most
  about two frame limits of request bytes per connection at once;
* meanwhile a monitor checks every half second that the broker pid is alive and records its
  peak RSS (``VmHWM``); a canary (:mod:`tests.fuzz.canary`) keeps producing and consuming with
  confluent-kafka on its own topic, and any error of it is a failure.

A request counts once its outcome is known: answered, answered-by-nothing (acks=0), or the
one that the connection closed after. Requests written behind a closing one are counted
apart (``unattributed``) and not toward the total.

Concurrency: one asyncio loop in the calling thread (:func:`run`); the canary has its own
thread.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker.protocol import registry
from broker.protocol.framing import skip_tagged_fields
from tests.fuzz import batches, mutations, strategies
from tests.fuzz.strategies import Generated, RandomSource

_I32 = struct.Struct(">i")
_SENTINEL = b"\x00\x12\x00\x00" + b"\x7f\xff\xff\xff" + b"\xff\xff"  # ApiVersions v0, corr max
UNSUPPORTED_VERSION = 35


@dataclass
class Mix:
    """Shares (out of 100) of each request mode."""

    structural: int = 45
    lying: int = 13
    produce: int = 17
    header: int = 8
    mutation: int = 17

    def pick(self, src: RandomSource) -> str:
        roll = src.integer(
            0, self.structural + self.lying + self.produce + self.header + self.mutation - 1
        )
        for name in ("structural", "lying", "produce", "header", "mutation"):
            share = getattr(self, name)
            if roll < share:
                return name
            roll -= share
        return "mutation"


def generate(src: RandomSource, mode: str) -> Generated:
    if mode == "structural":
        key, version, _n = src.pick(strategies.schema.all_versions())
        return strategies.structural(src, key, version, strange=0.1)
    if mode == "lying":
        key, version, _n = src.pick(strategies.schema.all_versions())
        return strategies.structural(src, key, version, lie=0.08, strange=0.1)
    if mode == "produce":
        return strategies.produce_request(src)
    if mode == "header":
        return strategies.header_fuzz(src)
    return mutations.any_mutation(src)


@dataclass
class Stats:
    seed: int = 0
    requests: int = 0
    answered: int = 0
    no_response: int = 0
    closed: int = 0
    unattributed: int = 0
    connections: int = 0
    failures: list[str] = field(default_factory=list)
    failure_kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    by_mode: collections.Counter[str] = field(default_factory=collections.Counter)
    by_api: collections.Counter[str] = field(default_factory=collections.Counter)
    closed_by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    error_codes: collections.Counter[str] = field(default_factory=collections.Counter)
    produce_codes: collections.Counter[str] = field(default_factory=collections.Counter)
    broker_rss_start_kb: int = 0
    broker_peak_rss_kb: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in (
            "by_mode",
            "by_api",
            "closed_by_kind",
            "error_codes",
            "produce_codes",
            "failure_kinds",
        ):
            out[key] = dict(sorted(getattr(self, key).items(), key=lambda kv: (-kv[1], kv[0])))
        out["failures"] = self.failures[:50]
        out["failure_count"] = len(self.failures)
        return out


def proc_status_kb(pid: int, key: str) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return -1
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return -1


def reset_peak_rss(pid: int) -> None:
    """Reset the process's VmHWM to its current RSS (``/proc/PID/clear_refs``, value 5), so
    the peak measured is the run's, not start-up's. Best effort: without permission the
    peak includes start-up."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


_API_NAMES = {int(k): v[0] for k, v in registry.SUPPORTED_APIS.items()}


def _produce_acks_zero(body: bytes) -> bool:
    """Whether a frame body is a Produce whose acks field reads 0 (it owes no response)."""
    try:
        if len(body) < 10 or body[0:2] != b"\x00\x00":
            return False
        version = int.from_bytes(body[2:4], "big", signed=True)
        n = int.from_bytes(body[8:10], "big", signed=True)
        pos = 10 + max(n, 0)
        flexible = registry.is_supported(0, version) and registry.is_flexible(0, version)
        if flexible:
            pos = skip_tagged_fields(body, pos)
            # compact nullable string
            length, shift = 0, 0
            while True:
                b = body[pos]
                pos += 1
                length |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            pos += max(length - 1, 0)
        else:
            tlen = int.from_bytes(body[pos : pos + 2], "big", signed=True)
            pos += 2 + max(tlen, 0)
        return body[pos : pos + 2] == b"\x00\x00"
    except (IndexError, ValueError, Exception):  # noqa: BLE001 - any malformed body: not acks=0
        return False


@dataclass(slots=True)
class _Sent:
    gen: Generated
    corr: int
    api_key: int
    version: int
    size: int
    acks_zero: bool


class Runner:
    def __init__(
        self,
        host: str,
        port: int,
        pid: int,
        *,
        seed: int,
        total: int,
        connections: int = 8,
        window: int = 32,
        timeout_s: float = 60.0,
        max_request_bytes: int = 1_048_576,
        mix: Mix | None = None,
        canary: Any = None,
        progress_every: int = 0,
        fail_fast: bool = True,
    ) -> None:
        self.host, self.port, self.pid = host, port, pid
        self.total = total
        self.connections = connections
        self.window = window
        self.timeout_s = timeout_s
        self.max_request_bytes = max_request_bytes
        self.mix = mix or Mix()
        self.canary = canary
        self.progress_every = progress_every
        self.fail_fast = fail_fast
        self.stats = Stats(seed=seed)
        self._issued = 0
        self._stop = False
        self._response_cls: dict[tuple[int, int], Any] = {}
        self._readers: dict[Any, Any] = {}

    # --- invariants ----------------------------------------------------------------------

    def fail(self, message: str) -> None:
        key = message.split(";", maxsplit=1)[0][:120]
        self.stats.failure_kinds[key] += 1
        if self.stats.failure_kinds[key] == 1:
            self.stats.failures.append(message)
        if self.fail_fast:
            self._stop = True

    def _decode_response(self, api_key: int, version: int, frame: bytes) -> Any:
        from kio.serial import entity_reader

        key = (api_key, version)
        cls = self._response_cls.get(key)
        if cls is None:
            cls = self._response_cls[key] = registry.response_class(api_key, version)
            self._readers[cls] = entity_reader(cls)
        pos = 4
        if registry.response_uses_flexible_header(api_key, version):
            pos = skip_tagged_fields(frame, pos)
        value, size = self._readers[cls](frame, pos)
        if pos + size != len(frame):
            raise ValueError(f"{len(frame) - pos - size} bytes after the response")
        return value

    def check_response(self, sent: _Sent, frame: bytes) -> None:
        api_key, version = sent.api_key, sent.version
        what = f"{_API_NAMES.get(api_key, api_key)} v{version} ({sent.gen.kind})"
        if registry.is_supported(api_key, version):
            try:
                value = self._decode_response(api_key, version, frame)
            except Exception as exc:  # noqa: BLE001 - any decode failure is the finding
                if api_key == 65 and "negative timestamp" in str(exc):
                    # kio cannot decode transactionStartTimeMs -1 (an Empty transaction),
                    # which is what Kafka itself answers: a limit of the checker, not a bug
                    self.stats.error_codes["DescribeTransactions:kio-negative-timestamp"] += 1
                    return
                self.fail(
                    f"{what}: malformed response: {exc!r}; request {sent.gen.body[:200].hex()}"
                )
                return
            code = getattr(value, "error_code", None)
            if code is not None:
                self.stats.error_codes[f"{_API_NAMES[api_key]}:{int(code)}"] += 1
            if api_key == 0 and sent.gen.produce_expect:
                self._check_produce(sent, value)
            return
        if api_key == 18:
            try:
                value = self._decode_response(18, 0, frame)
            except Exception as exc:  # noqa: BLE001
                self.fail(f"{what}: malformed ApiVersions fallback response: {exc!r}")
                return
            if int(value.error_code) != UNSUPPORTED_VERSION:
                self.fail(f"{what}: ApiVersions answered {value.error_code!r}")
            return
        if api_key in _API_NAMES:
            # an unsupported version answered with UNSUPPORTED_VERSION in that version's shape
            (err,) = struct.unpack_from(">h", frame, len(frame) - 2) if len(frame) >= 6 else (None,)
            self.stats.error_codes[f"{_API_NAMES[api_key]}:unsupported-version-answer"] += 1
            if UNSUPPORTED_VERSION not in _shorts(frame[4:]):
                self.fail(
                    f"{what}: answered without UNSUPPORTED_VERSION ({err}): {frame[:64].hex()}"
                )
            return
        self.fail(f"{what}: an unknown API key was answered: {frame[:64].hex()}")

    def _check_produce(self, sent: _Sent, value: Any) -> None:
        for topic in value.responses:
            for part in topic.partition_responses:
                key = (str(topic.name), int(part.index))
                expect = sent.gen.produce_expect.get(key)
                code = int(part.error_code)
                kinds = sent.gen.batch_by_partition.get(key, "?")
                self.stats.produce_codes[f"{kinds}:{code}"] += 1
                if expect and code not in expect and code not in batches.ENVIRONMENT:
                    self.fail(
                        f"Produce v{sent.version} {key} with batch {kinds}: error {code}, "
                        f"expected one of {sorted(expect)}; request {sent.gen.body.hex()[:4000]}"
                    )

    def on_close(self, sent: _Sent) -> None:
        gen = sent.gen
        self.stats.closed += 1
        self.stats.closed_by_kind[gen.kind] += 1
        if gen.valid and not sent.acks_zero and sent.size + 4 <= self.max_request_bytes:
            self.fail(
                f"{_API_NAMES.get(sent.api_key)} v{sent.version}: connection closed after a "
                f"request that follows the schema; request {gen.body[:3000].hex()}"
            )

    # --- workers -------------------------------------------------------------------------

    def _next(self, src: RandomSource) -> Generated | None:
        if self._stop or self._issued >= self.total + self.stats.unattributed:
            return None
        self._issued += 1
        mode = self.mix.pick(src)
        self.stats.by_mode[mode] += 1
        return generate(src, mode)

    async def _worker(self, index: int) -> None:
        src = RandomSource(random.Random(self.stats.seed * 1_000_003 + index))
        pending: list[Generated] = []
        while not self._stop:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=2**22)
            except OSError as exc:
                self.fail(f"cannot connect: {exc!r}")
                return
            self.stats.connections += 1
            try:
                more = await self._serve_connection(src, reader, writer, pending)
            finally:
                writer.transport.abort()
            if not more:
                return

    async def _serve_connection(
        self,
        src: RandomSource,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: list[Generated],
    ) -> bool:
        corr = 0
        while not self._stop:
            window: list[_Sent] = []
            out: list[bytes] = []
            half_close = False
            window_bytes = 0
            # a window holds at most `window` requests and about one frame limit of bytes, so
            # what the broker buffers for this connection stays near socket.request.max.bytes
            while len(window) < self.window and window_bytes < self.max_request_bytes:
                gen = pending.pop() if pending else self._next(src)
                if gen is None:
                    break
                corr += 1
                body = gen.body
                if len(body) >= 8:
                    body = body[:4] + _I32.pack(corr) + body[8:]
                api_key = int.from_bytes(body[0:2], "big", signed=True) if len(body) >= 2 else -1
                version = int.from_bytes(body[2:4], "big", signed=True) if len(body) >= 4 else -1
                real_corr = (
                    int.from_bytes(body[4:8], "big", signed=True) if len(body) >= 8 else None
                )
                acks_zero = _produce_acks_zero(body)
                sent = _Sent(
                    gen,
                    real_corr if real_corr is not None else -1,
                    api_key,
                    version,
                    len(body),
                    acks_zero,
                )
                window.append(sent)
                claim = gen.frame_claim
                out.append(_I32.pack(len(body) if claim is None else claim) + body)
                window_bytes += len(body)
                self.stats.by_api[_API_NAMES.get(api_key, "unknown")] += 1
                if claim is not None:
                    half_close = True
                    break
                if not gen.valid or (len(body) >= 8 and real_corr != corr):
                    break
            if not window:
                return False
            if any(s.api_key == 0 for s in window) and not half_close:
                out.append(_I32.pack(len(_SENTINEL)) + _SENTINEL)
            try:
                writer.write(b"".join(out))
                if half_close:
                    writer.write_eof()
                await writer.drain()
            except (ConnectionError, OSError):
                pass  # the broker closed meanwhile; the reads below find out where
            if not await self._read_window(reader, window) or half_close:
                return True  # closed (or our side half-closed): reconnect
        return False

    async def _read_window(self, reader: asyncio.StreamReader, window: list[_Sent]) -> bool:
        """Read the answers of ``window``; False when the broker closed the connection."""
        i = 0
        expect_sentinel = any(s.api_key == 0 for s in window)
        while i < len(window) or expect_sentinel:
            try:
                async with asyncio.timeout(self.timeout_s):
                    head = await reader.readexactly(4)
                    (size,) = _I32.unpack(head)
                    frame = await reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                # requests that owe no answer are done; the close belongs to the next one
                while i < len(window) - 1 and window[i].acks_zero:
                    self._count(window[i])
                    self.stats.no_response += 1
                    i += 1
                if i < len(window):
                    self._count(window[i])
                    self.on_close(window[i])
                    self.stats.unattributed += len(window) - i - 1
                return False
            except TimeoutError:
                what = window[i] if i < len(window) else None
                self.fail(
                    f"no answer within {self.timeout_s}s to "
                    f"{what and _API_NAMES.get(what.api_key)} v{what and what.version} "
                    f"({what and what.gen.kind}); request {what and what.gen.body[:2000].hex()}"
                )
                return False
            (corr,) = struct.unpack_from(">i", frame, 0) if size >= 4 else (None,)
            if corr == 0x7FFFFFFF and expect_sentinel:
                while i < len(window):  # everything before the sentinel owed nothing
                    if not window[i].acks_zero:
                        self.fail(
                            f"{_API_NAMES.get(window[i].api_key)}: no response before a later one"
                        )
                    self._count(window[i])
                    self.stats.no_response += 1
                    i += 1
                expect_sentinel = False
                continue
            while i < len(window) and window[i].acks_zero and window[i].corr != corr:
                self._count(window[i])
                self.stats.no_response += 1
                i += 1
            if i >= len(window):
                self.fail(f"unexpected response with correlation id {corr}")
                return False
            sent = window[i]
            if corr != sent.corr:
                self.fail(
                    f"{_API_NAMES.get(sent.api_key)} v{sent.version}: response correlation id "
                    f"{corr}, expected {sent.corr}"
                )
                return False
            self._count(sent)
            self.stats.answered += 1
            self.check_response(sent, frame)
            i += 1
        return True

    def _count(self, sent: _Sent) -> None:
        self.stats.requests += 1
        if self.progress_every and self.stats.requests % self.progress_every == 0:
            s = self.stats
            print(
                f"[fuzz] {s.requests} requests, {s.closed} closed, "
                f"{time.monotonic() - self._t0:.0f}s, peak RSS {s.broker_peak_rss_kb // 1024} MiB",
                flush=True,
            )

    async def _monitor(self) -> None:
        while not self._stop:
            if not pid_alive(self.pid):
                self.fail(f"broker pid {self.pid} is gone")
                return
            hwm = proc_status_kb(self.pid, "VmHWM")
            self.stats.broker_peak_rss_kb = max(self.stats.broker_peak_rss_kb, hwm)
            if self.canary is not None and self.canary.errors:
                self.fail(f"canary: {self.canary.errors[0]}")
            await asyncio.sleep(0.5)

    async def run_async(self) -> Stats:
        self._t0 = time.monotonic()
        reset_peak_rss(self.pid)
        self.stats.broker_rss_start_kb = proc_status_kb(self.pid, "VmRSS")
        monitor = asyncio.create_task(self._monitor())
        try:
            await asyncio.gather(*(self._worker(i) for i in range(self.connections)))
        finally:
            self._stop = True
            await monitor
        if not pid_alive(self.pid):
            self.fail(f"broker pid {self.pid} is gone")
        self.stats.broker_peak_rss_kb = max(
            self.stats.broker_peak_rss_kb, proc_status_kb(self.pid, "VmHWM")
        )
        self.stats.seconds = round(time.monotonic() - self._t0, 1)
        return self.stats

    def run(self) -> Stats:
        batches.warm_up()
        return asyncio.run(self.run_async())


def _shorts(data: bytes) -> set[int]:
    return {
        int.from_bytes(data[i : i + 2], "big", signed=True) for i in range(0, max(len(data) - 1, 0))
    }


def write_report(path: Path, stats: Stats, extra: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = stats.to_json() | extra
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
