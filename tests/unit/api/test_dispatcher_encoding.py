"""The dispatcher's response encoding (broker/api/dispatcher.py), regressions from the
protocol fuzzer (issue 17): an error message that echoes a 32,767-byte topic name no longer
makes the response unencodable (which killed the connection's writer task)."""

from __future__ import annotations

import pytest

from broker.api import dispatcher
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.response import CloseConnection

pytestmark = pytest.mark.unit


def _create_topics_response(message: str) -> object:
    cls = registry.response_class(ApiKey.CREATE_TOPICS, 4)
    result_cls = registry.nested(cls, "CreatableTopicResult")
    import datetime

    result = registry.build(
        result_cls,
        name="t" * 32000,
        topic_id=None,
        error_code=ErrorCode.invalid_partitions,
        error_message=message,
        topic_config_error_code=0,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=(result,))


def test_too_long_error_message_is_cut_short() -> None:
    response = _create_topics_response("topic " + "t" * 32767 + " is invalid")
    with pytest.raises(Exception):  # noqa: B017 - kio's own OutOfBoundValue
        registry.encode(response)
    body = dispatcher._encode(response, ApiKey.CREATE_TOPICS, 4)
    decoded, _ = registry._reader(type(response))(body, 0)
    message = decoded.topics[0].error_message
    assert len(message) == dispatcher.MAX_ERROR_MESSAGE_CHARS and message.endswith("...")
    assert decoded.topics[0].name == "t" * 32000


def test_short_messages_are_untouched() -> None:
    response = _create_topics_response("bad")
    assert dispatcher._shorten_messages(response) is response
    assert dispatcher._encode(response, ApiKey.CREATE_TOPICS, 4) == registry.encode(response)


def test_unencodable_response_closes_the_connection() -> None:
    response = _create_topics_response("ok")
    broken = dispatcher.dataclasses.replace(response, topics=("not a struct",))  # type: ignore[attr-defined]
    with pytest.raises(CloseConnection):
        dispatcher._encode(broken, ApiKey.CREATE_TOPICS, 4)
