"""Dropping unknown tagged fields from a flexible request body, so kio can decode it.

KIP-482: a reader must skip the tagged fields it does not know (a newer client may send
them; Kafka keeps them as "unknown tagged fields" and otherwise ignores them). kio's decoder
raises ``KeyError("Unknown tagged field tag: N")`` instead. The dispatcher decodes with kio
first (the fast path; clients rarely send unknown tags) and only when that fails this way
calls :func:`strip_unknown_tags`, which walks the request's schema over the bytes and
returns a copy without the unknown tags; that copy is then decoded again.

Walk format (Kafka's flexible encoding): compact strings/bytes/records are an unsigned
varint of length+1 (0 = null); compact arrays an unsigned varint of count+1; every struct
ends with a tagged-field section (uvarint count, then uvarint tag, uvarint size, bytes).
Every length is checked against the buffer, so a lying length raises
:class:`~broker.protocol.framing.InvalidRequestError` (nothing is allocated from it).

Concurrency: pure functions; the per-class plans are cached (immutable once built).
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)

from broker.protocol.framing import InvalidRequestError, read_uvarint, write_uvarint

_FIXED = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
    "float64": 8,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_VARIABLE = frozenset({"string", "bytes", "records"})


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    kafka_type: str  # a key of _FIXED, one of _VARIABLE, "uvarint", "varint" or "struct"
    array: bool
    plan: _Plan | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    steps: tuple[_Step, ...]
    known_tags: dict[int, _Step]


@cache
def _plan(cls: Any) -> _Plan:
    hints = typing.get_type_hints(cls)
    steps: list[_Step] = []
    tags: dict[int, _Step] = {}
    for f in dataclasses.fields(cls):
        probe = dataclasses.field(metadata=f.metadata)
        probe.name = f.name
        probe.type = hints[f.name]
        kind = classify_field(probe)
        if isinstance(kind, EntityTupleField):
            step = _Step("struct", True, _plan(kind.type_))
        else:
            step = _Step(str(f.metadata["kafka_type"]), isinstance(kind, PrimitiveTupleField))
        tag = get_field_tag(probe)
        if tag is None:
            steps.append(step)
        else:
            tags[int(tag)] = step
    return _Plan(tuple(steps), tags)


def _need(buf: bytes | memoryview, pos: int) -> None:
    if pos > len(buf):
        raise InvalidRequestError("a field runs past the end of the request")


def _skip_value(buf: bytes | memoryview, pos: int, step: _Step, out: bytearray) -> int:
    """Copy one (non-array) value at ``pos`` to ``out``; return the position after it."""
    if step.kafka_type == "struct":
        assert step.plan is not None
        return _copy_struct(buf, pos, step.plan, out)
    size = _FIXED.get(step.kafka_type)
    if size is not None:
        end = pos + size
    elif step.kafka_type in _VARIABLE:
        n, after = read_uvarint(buf, pos)
        end = after + max(n - 1, 0)
    elif step.kafka_type in ("uvarint", "varint", "uvarlong", "varlong"):
        _n, end = read_uvarint(buf, pos)
    else:
        raise InvalidRequestError(f"cannot walk a field of type {step.kafka_type}")
    _need(buf, end)
    out += buf[pos:end]
    return end


def _copy_struct(buf: bytes | memoryview, pos: int, plan: _Plan, out: bytearray) -> int:
    for step in plan.steps:
        if step.array:
            count, after = read_uvarint(buf, pos)
            out += buf[pos:after]
            pos = after
            if count - 1 > len(buf) - pos:  # every element takes at least one byte
                raise InvalidRequestError(f"array of {count - 1} elements in a shorter request")
            for _ in range(count - 1):
                pos = _skip_value(buf, pos, step, out)
        else:
            pos = _skip_value(buf, pos, step, out)
    # the tagged-field section: keep the known tags, drop the others
    count, pos = read_uvarint(buf, pos)
    kept: list[bytes] = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        _need(buf, end)
        if tag in plan.known_tags:
            kept.append(write_uvarint(tag) + write_uvarint(size) + bytes(buf[pos:end]))
        pos = end
    out += write_uvarint(len(kept))
    for item in kept:
        out += item
    return pos


def strip_unknown_tags(cls: Any, buf: bytes | memoryview, pos: int) -> bytes:
    """The flexible message ``cls`` at ``buf[pos:]`` re-written without unknown tagged fields
    (nested structs included); bytes after the message are kept as they are."""
    if not cls.__flexible__:
        raise InvalidRequestError(f"{cls.__name__} has no tagged fields")
    out = bytearray()
    end = _copy_struct(buf, pos, _plan(cls), out)
    out += buf[end:]
    return bytes(out)


def is_unknown_tag_error(exc: BaseException) -> bool:
    """Whether kio's decoder failed on an unknown tagged field."""
    return isinstance(exc, KeyError) and "Unknown tagged field" in str(exc)
