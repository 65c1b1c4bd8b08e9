"""broker/cli/web_console/messages.py: the Messages form's fields parsed with a message that
names the bad field (offsets, partitions, counts, timestamps as ISO date-times or epoch ms,
isolation, rendering), and keys/values shown as text, pretty JSON or hex, with bytes that are
not UTF-8 shown as hex after a note (never as replacement characters)."""

from __future__ import annotations

import pytest

from broker.cli.web_console.cluster_source import ConsoleError
from broker.cli.web_console.group_source import reset_spec
from broker.cli.web_console.messages import (
    MAX_COUNT,
    MAX_TIMESTAMP_MS,
    NOT_UTF8,
    iso_ms,
    parse_integer,
    parse_query,
    parse_timestamp,
    render_bytes,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("1769860800000", 1_769_860_800_000),
        (" 1769860800000 ", 1_769_860_800_000),
        ("2026-01-31T12:00:00Z", 1_769_860_800_000),
        ("2026-01-31T12:00:00z", 1_769_860_800_000),
        ("2026-01-31T12:00:00", 1_769_860_800_000),  # no zone: UTC
        ("2026-01-31T13:00:00+01:00", 1_769_860_800_000),
        ("2026-01-31T12:00:00.250Z", 1_769_860_800_250),
        ("2026-01-31", 1_769_817_600_000),
    ],
)
def test_timestamps(text: str, ms: int) -> None:
    assert parse_timestamp(text) == ms


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "timestamp '': expected an ISO date-time (2026-01-31T12:00:00Z) or milliseconds"),
        ("yesterday", "timestamp 'yesterday': expected an ISO date-time"),
        ("2026-13-01", "timestamp '2026-13-01': expected an ISO date-time"),
        ("-5", "timestamp '-5': expected an ISO date-time"),
        ("1e3", "timestamp '1e3': expected an ISO date-time"),
        ("2026-01-31T12:00:00+25:00", "timestamp '2026-01-31T12:00:00+25:00': expected"),
        ("1969-12-31T23:59:59Z", "timestamp '1969-12-31T23:59:59Z': before 1970-01-01"),
        (str(MAX_TIMESTAMP_MS + 1), "at most 253402300799999 (year 9999)"),
        ("9" * 30, "milliseconds since the epoch, at most"),
    ],
)
def test_bad_timestamps_say_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(ConsoleError) as error:
        parse_timestamp(text)
    assert message in str(error.value)


def test_iso_ms_round_trips() -> None:
    assert iso_ms(1_769_860_800_250) == "2026-01-31T12:00:00.250Z"
    assert parse_timestamp(iso_ms(1_769_860_800_250)) == 1_769_860_800_250


def test_a_query_with_defaults_and_values() -> None:
    q = parse_query("orders", {})
    assert (q.partition, q.offset, q.timestamp_ms, q.count) == (0, 0, None, 20)
    assert (q.isolation, q.render) == ("read_committed", "text")
    q = parse_query(
        "orders",
        {
            "partition": "2",
            "from": "timestamp",
            "timestamp": "2026-01-31T12:00:00Z",
            "count": str(MAX_COUNT),
            "isolation": "read_uncommitted",
            "render": "hex",
        },
    )
    assert (q.partition, q.offset, q.timestamp_ms, q.count) == (2, None, 1_769_860_800_000, 500)
    assert (q.isolation, q.render) == ("read_uncommitted", "hex")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"offset": "abc"}, "offset 'abc': expected a whole number"),
        ({"offset": "1.5"}, "offset '1.5': expected a whole number"),
        ({"offset": "-1"}, "offset '-1': must be at least 0"),
        ({"offset": str(2**63)}, f"offset '{2**63}': must be at most {2**63 - 1}"),
        ({"partition": "x"}, "partition 'x': expected a whole number"),
        ({"partition": "-2"}, "partition '-2': must be at least 0"),
        ({"count": "0"}, "count '0': must be at least 1"),
        ({"count": "501"}, "count 501: at most 500 messages per page"),
        ({"from": "timestamp", "timestamp": "soon"}, "timestamp 'soon'"),
        ({"isolation": "dirty"}, "isolation 'dirty': one of read_committed, read_uncommitted"),
        ({"render": "xml"}, "render 'xml': one of text, json, hex"),
    ],
)
def test_bad_query_fields_are_named(params: dict[str, str], message: str) -> None:
    with pytest.raises(ConsoleError) as error:
        parse_query("orders", params)
    assert message in str(error.value)


def test_integers_of_other_forms() -> None:
    assert parse_integer(" 42 ", "start offset") == 42
    with pytest.raises(ConsoleError, match="replication factor '99999999999': must be at most"):
        parse_integer("99999999999", "replication factor", 1, 2**31 - 1)
    with pytest.raises(ConsoleError, match="offset 'ten': expected a whole number"):
        reset_spec("offset", "ten")
    with pytest.raises(ConsoleError, match="timestamp 'then'"):
        reset_spec("timestamp", "then")
    with pytest.raises(ConsoleError, match="reset to 'sideways': one of earliest, latest"):
        reset_spec("sideways", "")
    assert reset_spec("offset", "7").value == 7


def test_text_json_and_hex() -> None:
    data = '{"order": 1, "item": "w\u00e9dget"}'.encode()
    assert render_bytes(data, "text") == '{"order": 1, "item": "w\u00e9dget"}'
    assert render_bytes(data, "json") == '{\n  "order": 1,\n  "item": "w\u00e9dget"\n}'
    assert render_bytes(b"\x00AB", "hex") == "00 41 42"
    assert render_bytes(b"", "hex") == ""
    assert render_bytes(b"", "text") == ""
    assert render_bytes(None, "text") is None
    assert render_bytes(None, "hex") is None


def test_json_rendering_of_what_is_not_json_falls_back_to_text() -> None:
    assert render_bytes(b"plain words", "json") == "plain words"
    assert render_bytes(b'{"cut": ', "json") == '{"cut": '


@pytest.mark.parametrize("how", ["text", "json"])
def test_bytes_that_are_not_utf8_show_as_hex_with_a_note(how: str) -> None:
    shown = render_bytes(b"\xff\xfe\x00A", how)
    assert shown == NOT_UTF8 + "ff fe 00 41"
    assert shown is not None and "\ufffd" not in shown
    assert shown.startswith("(not UTF-8")
