"""The API registry: ApiKey-keyed versions, and ``build``'s tolerance for fields a version
lacks next to its refusal of fields no version has (a misspelling)."""

from __future__ import annotations

import datetime

import pytest

from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode

pytestmark = pytest.mark.unit


def test_supported_apis_are_keyed_by_api_key() -> None:
    assert all(isinstance(k, ApiKey) for k in registry.SUPPORTED_APIS)
    assert registry.is_supported(ApiKey.PRODUCE, 9)
    assert registry.is_supported(0, 3)  # a plain int from the wire works too
    assert not registry.is_supported(0, 2)
    assert not registry.is_supported(9999, 0)  # not an API key at all


def test_build_drops_fields_other_versions_have() -> None:
    cls = registry.response_class(ApiKey.LIST_OFFSETS, 1)  # v1 has no leader_epoch (v4+)
    part_cls = registry.nested(cls, "ListOffsetsPartitionResponse")
    part = registry.build(
        part_cls,
        partition_index=0,
        error_code=ErrorCode.none,
        timestamp=-1,
        offset=5,
        leader_epoch=3,
    )
    assert part.offset == 5 and not hasattr(part, "leader_epoch")


def test_build_refuses_a_misspelled_field() -> None:
    cls = registry.response_class(ApiKey.INIT_PRODUCER_ID, 4)
    with pytest.raises(TypeError, match="no field producer_epok"):
        registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            producer_id=1,
            producer_epok=0,
        )
