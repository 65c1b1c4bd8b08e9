"""``millrace groups`` (broker/cli/groups*.py): argument parsing, the describe/list/delete
output formats and the reset-offsets planning, as pure functions (no cluster)."""

from __future__ import annotations

import argparse
import datetime

import pytest

from broker.cli import groups_output as go
from broker.cli import groups_reset as gr
from broker.cli.common import CliError
from broker.cli.main import build_parser, main
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["groups", *argv])


# --- argument parsing ----------------------------------------------------------------------


def test_parser_registers_the_four_actions() -> None:
    assert _parse("list").groups_command == "list"
    args = _parse("describe", "--group", "a", "--group", "b", "--members", "--verbose")
    assert args.group == ["a", "b"] and args.members and args.verbose
    args = _parse("reset-offsets", "--group", "g", "--topic", "t:0,1", "--shift-by", "-5")
    assert args.shift_by == -5 and args.topic == ["t:0,1"] and not args.execute
    assert _parse("delete", "--all-groups").all_groups


@pytest.mark.parametrize(
    "argv",
    [
        ["describe"],  # no group
        ["describe", "--group", "g", "--all-groups"],
        ["describe", "--group", "g", "--members", "--state"],
        ["reset-offsets", "--group", "g", "--to-earliest"],  # no topic scope
        ["reset-offsets", "--group", "g", "--all-topics"],  # no scenario
        ["reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
        [
            "reset-offsets",
            "--group",
            "g",
            "--all-topics",
            "--to-earliest",
            "--execute",
            "--dry-run",
        ],
        ["reset-offsets", "--group", "g", "--all-topics", "--to-offset", "x"],
        ["delete"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["groups", *argv])
    assert info.value.code == 2


def test_verbose_without_members_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["groups", "describe", "--group", "g", "--verbose", "--bootstrap-server", "x:1"])
    assert info.value.code == 2
    assert "--verbose" in capsys.readouterr().err


def test_bad_dir_is_one_line_exit_1(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["groups", "list", "--dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("millrace groups: --dir ") and err.count("\n") == 1


def test_parse_topic_spec() -> None:
    assert gr.parse_topic_spec("t") == ("t", None)
    assert gr.parse_topic_spec("t:2,0,2") == ("t", [0, 2])
    for bad in ("t:", "t:a", ":1", "t:-1"):
        with pytest.raises(CliError, match="--topic"):
            gr.parse_topic_spec(bad)


def test_select_partitions() -> None:
    counts = {"a": 3, "b": 2}
    assert gr.select_partitions([("a", None), ("b", [1])], counts) == [
        TP("a", 0),
        TP("a", 1),
        TP("a", 2),
        TP("b", 1),
    ]
    with pytest.raises(CliError, match="topic 'c' does not exist"):
        gr.select_partitions([("c", None)], counts)
    with pytest.raises(CliError, match="no partition 2"):
        gr.select_partitions([("b", [2])], counts)


def test_parse_datetime_ms() -> None:
    epoch_2024 = 1704067200000  # 2024-01-01T00:00:00Z
    assert gr.parse_datetime_ms("2024-01-01T00:00:00.000Z") == epoch_2024
    assert gr.parse_datetime_ms("2024-01-01T00:00:00.250") == int(
        datetime.datetime(2024, 1, 1, 0, 0, 0, 250000).astimezone().timestamp() * 1000
    )
    assert gr.parse_datetime_ms("2024-01-01T01:00:00.000+01:00") == epoch_2024
    assert gr.parse_datetime_ms("2023-12-31T23:00:00-01:00") == epoch_2024
    assert gr.parse_datetime_ms("2024-01-01T02:00:00.000+0200") == epoch_2024
    with pytest.raises(CliError, match="'T'"):
        gr.parse_datetime_ms("2024-01-01 00:00:00")
    with pytest.raises(CliError, match="--to-datetime"):
        gr.parse_datetime_ms("2024-13-01T00:00:00")


def test_parse_duration_ms() -> None:
    assert gr.parse_duration_ms("PT15M") == 15 * 60_000
    assert gr.parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4500
    assert gr.parse_duration_ms("p2d") == 2 * 86_400_000
    for bad in ("P", "PT", "15M", "PT1X", ""):
        with pytest.raises(CliError, match="--by-duration"):
            gr.parse_duration_ms(bad)


def test_parse_states() -> None:
    assert go.parse_states("stable, EMPTY") == {"Stable", "Empty"}
    assert go.parse_states("") == set()
    with pytest.raises(CliError, match="State must be one of"):
        go.parse_states("Stable,Bogus")


def test_reset_spec_from_args() -> None:
    def spec(*argv: str) -> gr.ResetSpec:
        args = _parse("reset-offsets", "--group", "g", "--all-topics", *argv)
        return gr.reset_spec(args, lambda: 1_000_000)

    assert spec("--to-earliest") == gr.ResetSpec("earliest")
    assert spec("--to-latest") == gr.ResetSpec("latest")
    assert spec("--to-current") == gr.ResetSpec("current")
    assert spec("--to-offset", "7") == gr.ResetSpec("offset", 7)
    assert spec("--shift-by", "-3") == gr.ResetSpec("shift", -3)
    assert spec("--to-datetime", "1970-01-01T00:00:01.500Z") == gr.ResetSpec("datetime", 1500)
    assert spec("--by-duration", "PT10S") == gr.ResetSpec("duration", 990_000)


def test_state_name() -> None:
    from confluent_kafka import ConsumerGroupState

    assert go.state_name(ConsumerGroupState.STABLE) == "Stable"
    assert go.state_name(ConsumerGroupState.PREPARING_REBALANCING) == "PreparingRebalance"
    assert go.state_name(ConsumerGroupState.EMPTY) == "Empty"
    assert go.state_name("Dead") == "Dead"


# --- reset-offsets planning ----------------------------------------------------------------

A0, A1, A2 = TP("a", 0), TP("a", 1), TP("a", 2)
START = {A0: 0, A1: 10, A2: 0}
END = {A0: 100, A1: 50, A2: 0}
COMMITTED = {A0: 40, A1: 20}


def _plan(spec: gr.ResetSpec, by_time: dict[TP, int | None] | None = None) -> gr.ResetPlan:
    return gr.plan_reset(
        spec,
        [A1, A0, A2],
        committed=COMMITTED,
        log_start=START,
        log_end=END,
        by_time=by_time,
    )


def test_plan_earliest_latest_current() -> None:
    assert _plan(gr.ResetSpec("earliest")).offsets == {A0: 0, A1: 10, A2: 0}
    assert _plan(gr.ResetSpec("latest")).offsets == {A0: 100, A1: 50, A2: 0}
    # no committed offset on a2: the log end offset
    assert _plan(gr.ResetSpec("current")).offsets == {A0: 40, A1: 20, A2: 0}


def test_plan_to_offset_clamps_with_warnings() -> None:
    plan = _plan(gr.ResetSpec("offset", 60))
    assert plan.offsets == {A0: 60, A1: 50, A2: 0}
    assert plan.warnings == [
        "New offset (60) is higher than latest offset for topic partition a-1. "
        "Value will be set to 50",
        "New offset (60) is higher than latest offset for topic partition a-2. "
        "Value will be set to 0",
    ]
    plan = _plan(gr.ResetSpec("offset", 5))
    assert plan.offsets == {A0: 5, A1: 10, A2: 0}
    assert plan.warnings == [
        "New offset (5) is lower than earliest offset for topic partition a-1. "
        "Value will be set to 10",
        "New offset (5) is higher than latest offset for topic partition a-2. "
        "Value will be set to 0",
    ]


def test_plan_shift_by() -> None:
    plan = gr.plan_reset(
        gr.ResetSpec("shift", -15),
        [A0, A1],
        committed=COMMITTED,
        log_start=START,
        log_end=END,
    )
    assert plan.offsets == {A0: 25, A1: 10}  # 20 - 15 = 5 clamped to log start 10
    assert len(plan.warnings) == 1 and "a-1" in plan.warnings[0]
    plan = gr.plan_reset(
        gr.ResetSpec("shift", 100), [A0], committed=COMMITTED, log_start=START, log_end=END
    )
    assert plan.offsets == {A0: 100}
    with pytest.raises(CliError, match="Cannot shift offset for partition a-2"):
        _plan(gr.ResetSpec("shift", 1))


def test_plan_by_time_falls_back_to_log_end() -> None:
    plan = _plan(gr.ResetSpec("datetime", 123), {A0: 30, A1: None, A2: -1})
    assert plan.offsets == {A0: 30, A1: 50, A2: 0}
    assert plan.warnings == [
        "Partition 1 from topic a is empty. Falling back to latest known offset.",
        "Partition 2 from topic a is empty. Falling back to latest known offset.",
    ]
    assert gr.ResetSpec("duration", 1).needs_times() and not gr.ResetSpec("latest").needs_times()


def test_plan_needs_log_offsets() -> None:
    with pytest.raises(CliError, match="a-3"):
        gr.plan_reset(
            gr.ResetSpec("earliest"), [TP("a", 3)], committed={}, log_start=START, log_end=END
        )


def test_format_reset_plan() -> None:
    text = gr.format_reset_plan("grp", {A1: 10, A0: 0})
    assert text.splitlines() == [
        "",
        f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} NEW-OFFSET",
        f"{'grp':<30} {'a':<30} {'0':<10} 0",
        f"{'grp':<30} {'a':<30} {'1':<10} 10",
    ]
    assert gr.format_reset_plan("grp", {}) == ""


# --- describe ------------------------------------------------------------------------------

MEMBER_1 = go.MemberView("c1-uuid", "/127.0.0.1", "c1", (TP("t", 0),))
MEMBER_2 = go.MemberView("c2-uuid", "/127.0.0.1", "c2", (TP("t", 2), TP("t", 1)))
IDLE = go.MemberView("c3-uuid", "/127.0.0.1", "c3", ())
STABLE = go.GroupView("grp", "Stable", "127.0.0.1:9092 (1)", "range", (MEMBER_1, MEMBER_2, IDLE))


def test_offset_rows_members_first_then_unowned() -> None:
    committed = {TP("t", 0): 5, TP("t", 1): 7, TP("u", 0): 3}
    log_end = {TP("t", 0): 10, TP("t", 1): 7, TP("t", 2): 4}
    rows = go.offset_rows(STABLE, committed, log_end)
    assert [(r.topic, r.partition, r.consumer_id) for r in rows] == [
        ("t", 1, "c2-uuid"),  # the member with most partitions first
        ("t", 2, "c2-uuid"),
        ("t", 0, "c1-uuid"),
        ("u", 0, "-"),  # committed, no owner
    ]
    assert [(r.current_offset, r.log_end_offset, r.lag) for r in rows] == [
        (7, 7, 0),
        (None, 4, None),
        (5, 10, 5),
        (3, None, None),
    ]


def test_format_offsets_table() -> None:
    rows = [
        go.OffsetRow("grp", "t", 0, 5, 10, "c1-uuid", "/127.0.0.1", "c1"),
        go.OffsetRow("grp", "t", 1, None, 4, "c2-uuid", "/127.0.0.1", "c2"),
        go.OffsetRow("grp", "u", 0, 3, None),
    ]
    lines = go.format_offsets(rows).splitlines()
    assert lines[0] == ""
    assert lines[1].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    assert lines[2].split() == ["grp", "t", "0", "5", "10", "5", "c1-uuid", "/127.0.0.1", "c1"]
    assert lines[3].split() == ["grp", "t", "1", "-", "4", "-", "c2-uuid", "/127.0.0.1", "c2"]
    assert lines[4].split() == ["grp", "u", "0", "3", "-", "-", "-", "-", "-"]
    # Kafka's column widths: 15 for group/topic/consumer/host, 10 partition, 15 offsets
    assert lines[1].index("TOPIC") == 16 and lines[1].index("PARTITION") == 32
    assert lines[1].index("CURRENT-OFFSET") == 43
    assert lines[2].index("c1-uuid") == lines[1].index("CONSUMER-ID")
    assert lines[4].rstrip() == lines[4]


def test_state_notice() -> None:
    assert go.state_notice("g", "Stable", 3) == (None, True)
    assert go.state_notice("g", "Stable", 0) == (None, False)
    assert go.state_notice("g", "Empty", 2) == ("Consumer group 'g' has no active members.", True)
    assert go.state_notice("g", "PreparingRebalance", 1) == (
        "Warning: Consumer group 'g' is rebalancing.",
        True,
    )
    with pytest.raises(CliError, match="Consumer group 'g' does not exist."):
        go.state_notice("g", "Dead", 0)


def test_format_members_and_verbose() -> None:
    lines = go.format_members(STABLE, verbose=False).splitlines()
    assert lines[0] == ""
    assert lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert [ln.split() for ln in lines[2:]] == [
        ["grp", "c1-uuid", "/127.0.0.1", "c1", "1"],
        ["grp", "c2-uuid", "/127.0.0.1", "c2", "2"],
        ["grp", "c3-uuid", "/127.0.0.1", "c3", "0"],
    ]
    verbose = go.format_members(STABLE, verbose=True).splitlines()
    assert verbose[1].split()[-1] == "ASSIGNMENT"
    assert verbose[3].split()[-1] == "t(1,2)" and verbose[4].split()[-1] == "-"
    assert verbose[1].index("ASSIGNMENT") == verbose[3].index("t(1,2)")


def test_format_members_static_membership_column() -> None:
    group = go.GroupView("grp", "Stable", members=(go.MemberView("m", "h", "c", (), "inst-1"),))
    lines = go.format_members(group, verbose=False).splitlines()
    assert lines[1].split() == [
        "GROUP",
        "CONSUMER-ID",
        "GROUP-INSTANCE-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
    ]
    assert lines[2].split() == ["grp", "m", "inst-1", "h", "c", "0"]


def test_format_assignment() -> None:
    assert go.format_assignment([TP("b", 1), TP("a", 2), TP("a", 0)]) == "a(0,2),b(1)"
    assert go.format_assignment([]) == "-"


def test_format_state() -> None:
    lines = go.format_state(STABLE).splitlines()
    assert lines[0] == ""
    assert lines[1].split("  ")[0] == "GROUP"
    assert " ".join(lines[1].split()) == "GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS"
    assert " ".join(lines[2].split()) == "grp 127.0.0.1:9092 (1) range Stable 3"
    assert lines[2].index("Stable") == lines[1].index("STATE")
    assert lines[2].index("127.0.0.1") == lines[1].index("COORDINATOR")


def test_format_group_states() -> None:
    text = go.format_group_states([("a", "Stable"), ("a-much-longer-group", "Empty")])
    assert text.splitlines() == [
        f"{'GROUP':<19} STATE",
        f"{'a':<19} Stable",
        "a-much-longer-group Empty",
    ]


def test_format_delete_result() -> None:
    assert (
        go.format_delete_result(["a", "b"], {})
        == "Deletion of requested consumer groups ('a', 'b') was successful.\n"
    )
    text = go.format_delete_result(["a"], {"b": "The group is not empty. (NON_EMPTY_GROUP)"})
    assert text.splitlines() == [
        "Error: Deletion of some consumer groups failed:",
        "* Group 'b' could not be deleted due to: The group is not empty. (NON_EMPTY_GROUP)",
        "",
        "These other groups were deleted successfully: 'a'",
    ]
