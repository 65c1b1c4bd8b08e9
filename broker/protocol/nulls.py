"""Reject a decoded request whose non-nullable array was sent as null.

Kafka's generated readers throw "non-nullable field X was serialized as null" when an array
the schema does not allow to be null arrives with length -1 (legacy) or 0 (compact), and the
broker closes the connection as for any request it cannot parse. kio's decoder returns
``None`` for such an array instead, which handlers would then iterate. :func:`check` walks
the decoded request along the fields that can hold such an array (a plan per class, built
once from the dataclass fields) and raises :class:`InvalidRequestError` at the first null.

Concurrency: pure; the plans are cached and immutable.
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
    is_optional,
)

from broker.protocol.framing import InvalidRequestError

# (field name, may the array be null, plan for its struct elements or None)
_Plan = tuple[tuple[str, bool, Any], ...]


@cache
def _plan(cls: Any) -> _Plan:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        probe = dataclasses.field(metadata=f.metadata)
        probe.name = f.name
        probe.type = hints[f.name]
        kind = classify_field(probe)
        if isinstance(kind, EntityTupleField):
            inner = _plan(kind.type_)
            nullable = is_optional(probe)
            if inner or not nullable:
                out.append((f.name, nullable, inner or None))
        elif isinstance(kind, PrimitiveTupleField) and not is_optional(probe):
            out.append((f.name, False, None))
    return tuple(out)


def _walk(value: Any, plan: _Plan) -> None:
    for name, nullable, inner in plan:
        items = getattr(value, name)
        if items is None:
            if nullable:
                continue
            raise InvalidRequestError(f"non-nullable field {name} was serialized as null")
        if inner is not None:
            for item in items:
                _walk(item, inner)


def check(cls: Any, value: Any) -> None:
    """Raise InvalidRequestError if ``value`` (an instance of ``cls``) holds a null where
    its schema forbids one."""
    plan = _plan(cls)
    if plan:
        _walk(value, plan)
