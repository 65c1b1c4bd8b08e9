"""Byte-level mutation of valid request frames.

:func:`mutate` takes the body of a valid request (header + request, no size prefix) and
applies one to three of: bit flips, "interesting" byte values, truncation, insertion and
deletion of a range, duplication of a range, rewriting an int16/int32 at a random offset with
an interesting length (-1, -2, 0, 2**15-1, 2**31-1, the true remaining size +-1), splicing
the head of one request onto the tail of another, and rewriting the header's API key or
version. A small share gets a size prefix that lies (``frame_claim``): the runner then sends
the frame and half-closes its side, so the broker sees a short or a run-on frame.

The result is never ``valid`` (a mutation may happen to produce a valid request; the runner's
invariants for non-valid requests hold for those too).

The controller APIs (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown) are not
byte-mutated, and no mutation turns another request into one: a flipped byte can make a
guarded request (stale controller epoch, another broker's id) a legitimate one that takes
the only broker out of service (a ControlledShutdown of broker 1, a LeaderAndIsr from a
newer controller epoch after which the real controller's requests are stale), as any client
could on a Kafka cluster without an authorizer. Found by a long run (seed 678239): the
broker was fine, the cluster it served had been legitimately told to stop serving. They keep
their structural and lying fuzzing, whose generators guard those fields.

Concurrency: pure functions of the choices.
"""

from __future__ import annotations

from tests.fuzz import strategies, wire
from tests.fuzz.strategies import Generated, Source

CONTROLLER_APIS = frozenset(
    {
        strategies.LEADER_AND_ISR,
        strategies.STOP_REPLICA,
        strategies.UPDATE_METADATA,
        strategies.CONTROLLED_SHUTDOWN,
    }
)
_MUTABLE_VERSIONS = tuple(
    v for v in strategies.schema.all_versions() if v[0] not in CONTROLLER_APIS
)
_INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE)
_INTERESTING_16 = (-1, -2, 0, 1, 2**15 - 1, -(2**15))
_INTERESTING_32 = (-1, -2, 0, 1, 2**31 - 1, -(2**31), 2**20, 2**30)


def _edit_bytes(src: Source, data: bytearray, op: int, pos: int) -> None:
    """Operations 0-5 (in place): bit flip, interesting byte, truncation, insertion,
    deletion, duplication of a range."""
    n = len(data)
    if op == 0:  # bit flip
        data[pos] ^= 1 << src.integer(0, 7)
    elif op == 1:  # interesting byte
        data[pos] = src.pick(_INTERESTING_BYTES)
    elif op == 2:  # truncate
        del data[src.integer(0, n - 1) :]
    elif op == 3:  # insert random bytes
        data[pos:pos] = src.raw(src.integer(1, 32))
    elif op == 4:  # delete a range
        del data[pos : pos + src.integer(1, 32)]
    else:  # duplicate a range
        end = min(n, pos + src.integer(1, 64))
        data[end:end] = data[pos:end]


def _rewrite(src: Source, data: bytearray, op: int, pos: int, other: bytes) -> bytearray | None:
    """Operations 6-8 where they apply: an int16 or int32 length rewritten, a splice with
    ``other``; None where they do not (too close to the end, nothing to splice)."""
    n = len(data)
    if op == 6 and pos + 2 <= n:  # an int16 length rewritten
        value = src.pick((*_INTERESTING_16, n - pos - 2 + src.integer(-1, 1)))
        data[pos : pos + 2] = wire.i16(value)
        return data
    if op == 7 and pos + 4 <= n:  # an int32 length / count rewritten
        value = src.pick((*_INTERESTING_32, n - pos - 4 + src.integer(-1, 1)))
        data[pos : pos + 4] = wire.i32(value)
        return data
    if op == 8 and other:  # splice: our head, the other's tail
        cut = src.integer(0, len(other) - 1)
        return data[:pos] + bytearray(other[cut:])
    return None


def _one(src: Source, data: bytearray, other: bytes) -> bytearray:
    n = len(data)
    op = src.integer(0, 9)
    if n == 0:
        return bytearray(src.raw(src.integer(1, 16)))
    pos = src.integer(0, n - 1)
    if op <= 5:
        _edit_bytes(src, data, op, pos)
    elif (rewritten := _rewrite(src, data, op, pos, other)) is not None:
        data = rewritten
    elif n >= 4:  # header (op 9, or 6-8 where they do not apply): API key or version
        if src.chance(0.5):
            data[0:2] = wire.i16(src.integer(-5, 80))
        else:
            data[2:4] = wire.i16(src.integer(-2, 20))
    return data


def mutate(src: Source, base: Generated, other: Generated | None = None) -> Generated:
    """A mutated copy of ``base`` (``other`` provides splice material)."""
    data = bytearray(base.body)
    for _ in range(src.integer(1, 3)):
        data = _one(src, data, other.body if other is not None else b"")
    claim = None
    if src.chance(0.04):
        claim = len(data) + src.pick((-1, 1, src.integer(2, 1000), -len(data) // 2 - 1))
    api_key = int.from_bytes(data[0:2], "big", signed=True) if len(data) >= 2 else -1
    if api_key in CONTROLLER_APIS and len(data) >= 2:
        data[0:2] = wire.i16(base.api_key if base.api_key not in CONTROLLER_APIS else 18)
        api_key = int.from_bytes(data[0:2], "big", signed=True)
    version = int.from_bytes(data[2:4], "big", signed=True) if len(data) >= 4 else -1
    return Generated(api_key, version, bytes(data), "mutation", valid=False, frame_claim=claim)


def any_mutation(src: Source) -> Generated:
    """A valid request of a random API (a Produce a third of the time), mutated."""
    if src.chance(0.33):
        base = strategies.produce_request(src)
    else:
        api_key, version, _name = src.pick(_MUTABLE_VERSIONS)
        base = strategies.structural(src, api_key, version, strange=0.05)
    other = None
    if src.chance(0.2):
        api_key, version, _name = src.pick(strategies.schema.all_versions())
        other = strategies.structural(src, api_key, version, strange=0.0)
    return mutate(src, base, other)
