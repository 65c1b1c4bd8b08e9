"""kio request dataclasses read into a small field tree the fuzzer can walk quickly.

For each (api_key, version) of ``broker.protocol.registry.SUPPORTED_APIS``, :func:`message`
returns a :class:`Struct`: its fields in wire order (tagged fields apart), each with its
Kafka type (``int32``, ``string``, ``records``, ...), whether it is an array, whether the
schema allows null, its tag (flexible versions), and for arrays of structs the nested
:class:`Struct`. The field's Python type name (``TopicName``, ``GroupId``, ...) is kept as a
hint so generators can aim at names the broker knows.

Concurrency: the cache is filled on first use; build it from one thread (or accept that two
threads may build the same immutable value twice).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from broker.protocol import registry


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kafka_type: str  # "struct" for arrays of structs
    array: bool
    nullable: bool
    tag: int | None
    hint: str  # the annotation's innermost type name: TopicName, GroupId, i32, ...
    struct: Struct | None = None


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    flexible: bool
    fields: tuple[Field, ...]  # untagged, in wire order
    tagged: tuple[Field, ...]  # tagged fields (flexible only), by tag


def _hint_name(tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args:
        return _hint_name(args[0])
    if args:  # X | None
        named = [a for a in args if a is not type(None)]
        if named:
            return _hint_name(named[0])
    return getattr(tp, "__name__", str(tp))


@cache
def _struct(cls: Any) -> Struct:
    hints = typing.get_type_hints(cls)
    plain: list[Field] = []
    tagged: list[Field] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        probe = dataclasses.field(metadata=f.metadata)
        probe.name = f.name
        probe.type = tp
        kind = classify_field(probe)
        nested: Struct | None = None
        if isinstance(kind, EntityTupleField):
            nested = _struct(kind.type_)
            kafka_type = "struct"
        else:
            kafka_type = str(f.metadata["kafka_type"])
        tag = get_field_tag(probe)
        field = Field(
            name=f.name,
            kafka_type=kafka_type,
            array=isinstance(kind, EntityTupleField | PrimitiveTupleField),
            nullable=is_optional(probe),
            tag=None if tag is None else int(tag),
            hint=_hint_name(tp),
            struct=nested,
        )
        (tagged if tag is not None else plain).append(field)
    tagged.sort(key=lambda fld: fld.tag or 0)
    return Struct(cls.__name__, bool(cls.__flexible__), tuple(plain), tuple(tagged))


def message(api_key: int, version: int) -> Struct:
    """The request schema of (api_key, version)."""
    cls: Any = registry.request_class(api_key, version)
    return _struct(cls)


def all_versions() -> list[tuple[int, int, str]]:
    """Every supported (api_key, version, api name), in registry order."""
    out = []
    for key, (name, low, high) in registry.SUPPORTED_APIS.items():
        for version in range(low, high + 1):
            out.append((int(key), version, name))
    return out
