"""The broker's request decoding, in process, against the fuzzer's requests (issue 17).

* Every schema-valid request the generators make (strange values, unknown tagged fields)
  decodes with ``registry.decode_request``: the broker can parse what it must answer.
* A lying or mutated request either decodes or raises; decoding never aborts the process
  (kio's allocation from a claimed count did, before ``request_walk``) and a decoded request
  never holds a null where its schema forbids one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import nulls, registry
from broker.protocol.framing import parse_request_header, skip_tagged_fields
from tests.fuzz import mutations, strategies
from tests.fuzz.strategies import DrawSource, Generated

pytestmark = pytest.mark.property

SETTINGS = settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _decode(body: bytes) -> Any:
    header, pos = parse_request_header(body)
    if not registry.is_supported(header.api_key, header.api_version):
        return None
    if registry.is_flexible(header.api_key, header.api_version):
        pos = skip_tagged_fields(body, pos)
    return registry.decode_request(header.api_key, header.api_version, body, pos)


@SETTINGS
@given(strategies.requests())
def test_schema_valid_requests_decode(gen: Generated) -> None:
    if not gen.valid:
        return
    value = _decode(gen.body)
    assert dataclasses.is_dataclass(value)


@SETTINGS
@given(strategies.requests(lie=0.15))
def test_lying_requests_decode_or_raise(gen: Generated) -> None:
    try:
        value = _decode(gen.body)
    except Exception:  # noqa: BLE001 - the dispatcher closes the connection on any of these
        return
    if value is not None:
        nulls.check(type(value), value)  # a decoded request has no forbidden null


@SETTINGS
@given(st.data())
def test_mutated_requests_decode_or_raise(data: st.DataObject) -> None:
    gen = mutations.any_mutation(DrawSource(data.draw))
    try:
        value = _decode(gen.body)
    except Exception:  # noqa: BLE001
        return
    if value is not None:
        nulls.check(type(value), value)
