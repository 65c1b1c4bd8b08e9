"""``millrace groups reset-offsets``: what to reset to and the plan, computed as
``kafka-consumer-groups.sh`` does.

The options become a :class:`ResetSpec` (``--to-earliest``, ``--to-offset N``,
``--to-datetime``, ``--by-duration``, ...; :func:`reset_spec`) and ``--topic T[:P,P]``
specs a partition list (:func:`select_partitions`); :func:`plan_reset` turns the spec, the
group's committed offsets and the partitions' log start/end offsets into the new offsets
(clamped to the log, with Kafka's warnings), and :func:`format_reset_plan` prints them.
Pure functions over frozen values; a bad option raises ``CliError`` naming it.
"""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.cli.common import CliError, Column, format_table
from broker.types import TopicPartition

RESET_KINDS = ("earliest", "latest", "current", "offset", "shift", "datetime", "duration")


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """What to reset to: ``kind`` (one of RESET_KINDS) and its value (the offset, the shift,
    or the timestamp in ms for ``datetime``/``duration``)."""

    kind: str
    value: int = 0

    def needs_times(self) -> bool:
        return self.kind in ("datetime", "duration")


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """New offsets per partition, and Kafka's warnings (clamping, empty partitions)."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """``--topic``'s ``t`` (every partition) or ``t:0,1`` -> (topic, partitions or None)."""
    topic, sep, parts = text.partition(":")
    topic = topic.strip()
    if not topic:
        raise CliError(f"--topic {text!r}: no topic name")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError as exc:
        raise CliError(f"--topic {text!r}: partitions must be integers (t:0,1,2)") from exc
    if not partitions:
        raise CliError(f"--topic {text!r}: no partitions after ':'")
    if partitions[0] < 0:
        raise CliError(f"--topic {text!r}: partitions must not be negative")
    return topic, partitions


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO-8601 ``YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm|+hhmm]`` -> epoch ms.
    Without a zone the local time zone applies (as in Kafka)."""
    if "T" not in text:
        raise CliError(
            f"--to-datetime {text}: Error parsing timestamp. It does not contain a 'T' "
            "according to ISO8601 format"
        )
    candidate = text.strip()
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    try:
        dt = datetime.datetime.fromisoformat(candidate)
    except ValueError as exc:
        raise CliError(
            f"--to-datetime {text}: expected YYYY-MM-DDTHH:mm:SS.sss with an optional "
            "zone (Z, +hh:mm)"
        ) from exc
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time zone
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (dt - epoch) // datetime.timedelta(milliseconds=1)


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """``--by-duration``: ISO-8601 ``PnDTnHnMnS`` (e.g. ``PT15M``, ``P1DT2H``) -> ms."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groupdict().values()) or text.strip().upper().endswith("T"):
        raise CliError(f"--by-duration {text}: expected an ISO-8601 duration PnDTnHnMnS")
    d, h, m = (int(match.group(k) or 0) for k in "dhm")
    s = float(match.group("s") or 0)
    return round(((d * 24 + h) * 60 + m) * 60_000 + s * 1000)


def select_partitions(
    specs: Sequence[tuple[str, list[int] | None]],
    topic_partitions: Mapping[str, int],
) -> list[TopicPartition]:
    """The partitions ``--topic`` specs name, given each existing topic's partition count;
    an unknown topic or partition raises CliError."""
    out: set[TopicPartition] = set()
    for topic, partitions in specs:
        count = topic_partitions.get(topic)
        if count is None:
            raise CliError(f"--topic {topic}: topic '{topic}' does not exist")
        if partitions is None:
            out.update(TopicPartition(topic, p) for p in range(count))
            continue
        for p in partitions:
            if p >= count:
                raise CliError(
                    f"--topic {topic}:{p}: topic '{topic}' has {count} partition(s), "
                    f"no partition {p}"
                )
            out.add(TopicPartition(topic, p))
    return sorted(out)


def plan_reset(
    spec: ResetSpec,
    partitions: Iterable[TopicPartition],
    *,
    committed: Mapping[TopicPartition, int],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int | None] | None = None,
) -> ResetPlan:
    """The new offset of each partition, computed as kafka-consumer-groups.sh does:
    earliest/latest are the log start/end offsets; ``offset`` and ``shift`` (committed +
    N) are clamped to [log start, log end] with a warning; ``current`` keeps the committed
    offset (log end without one); ``datetime``/``duration`` take the offset for the
    timestamp (``by_time``; None or negative: no record that new, so the log end offset
    with a warning). A partition without known log offsets raises CliError, as does
    ``shift`` without a committed offset."""
    plan = ResetPlan()
    times = by_time or {}
    for tp in sorted(set(partitions)):
        start, end = log_start.get(tp), log_end.get(tp)
        if start is None or end is None:
            raise CliError(f"cannot find the log start and end offsets of partition {tp}")
        plan.offsets[tp] = _new_offset(spec, tp, start, end, committed, times, plan.warnings)
    return plan


def _new_offset(
    spec: ResetSpec,
    tp: TopicPartition,
    start: int,
    end: int,
    committed: Mapping[TopicPartition, int],
    times: Mapping[TopicPartition, int | None],
    warnings: list[str],
) -> int:
    """The partition's new offset (see :func:`plan_reset`), its warnings added to
    ``warnings``."""
    if spec.kind == "earliest":
        return start
    if spec.kind == "latest":
        return end
    if spec.kind == "current":
        return committed.get(tp, end)
    if spec.kind in ("offset", "shift"):
        return _clamped(tp, _requested(spec, tp, committed), start, end, warnings)
    if spec.kind in ("datetime", "duration"):
        found = times.get(tp)
        if found is None or found < 0:
            warnings.append(
                f"Partition {tp.partition} from topic {tp.topic} is empty. "
                "Falling back to latest known offset."
            )
            return end
        return min(max(found, start), end)
    raise ValueError(f"unknown reset kind {spec.kind!r}")


def _requested(spec: ResetSpec, tp: TopicPartition, committed: Mapping[TopicPartition, int]) -> int:
    """The offset ``offset`` or ``shift`` asks for (``shift``: the committed offset + N)."""
    if spec.kind == "offset":
        return spec.value
    current = committed.get(tp)
    if current is None:
        raise CliError(
            f"Cannot shift offset for partition {tp} since there is no current committed offset"
        )
    return current + spec.value


def _clamped(tp: TopicPartition, requested: int, start: int, end: int, warnings: list[str]) -> int:
    """``requested`` clamped to [``start``, ``end``], with a warning when it is not in."""
    if requested > end:
        warnings.append(
            f"New offset ({requested}) is higher than latest offset for topic "
            f"partition {tp}. Value will be set to {end}"
        )
        return end
    if requested < start:
        warnings.append(
            f"New offset ({requested}) is lower than earliest offset for topic "
            f"partition {tp}. Value will be set to {start}"
        )
        return start
    return requested


def format_reset_plan(group: str, offsets: Mapping[TopicPartition, int]) -> str:
    """Kafka's ``GROUP TOPIC PARTITION NEW-OFFSET`` table (empty string for no partitions)."""
    if not offsets:
        return ""
    columns = (
        Column("GROUP", 30),
        Column("TOPIC", 30),
        Column("PARTITION", 10),
        Column("NEW-OFFSET", 15),
    )
    rows = [(group, tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())]
    return "\n".join(["", *format_table(columns, rows)]) + "\n"


def reset_spec(args: argparse.Namespace, now_ms: Callable[[], int]) -> ResetSpec:
    """The ResetSpec of parsed ``reset-offsets`` arguments."""
    for flag, kind in (
        ("to_earliest", "earliest"),
        ("to_latest", "latest"),
        ("to_current", "current"),
    ):
        if getattr(args, flag):
            return ResetSpec(kind)
    if args.to_offset is not None:
        return ResetSpec("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift", args.shift_by)
    if args.to_datetime is not None:
        return ResetSpec("datetime", parse_datetime_ms(args.to_datetime))
    if args.by_duration is not None:
        return ResetSpec("duration", now_ms() - parse_duration_ms(args.by_duration))
    raise CliError("reset-offsets needs a scenario (--to-earliest, --to-offset, ...)")
