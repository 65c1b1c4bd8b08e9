"""``RELIABILITY.md``'s fault table, from the runner's JSON reports.

Usage: ``python -m tests.fault.report [--reports reliability/faults] [--out RELIABILITY.md]``.
The section between the markers ``<!-- fault-table:begin -->`` and
``<!-- fault-table:end -->`` of ``--out`` is replaced (the rest of the file, written by
hand, is kept); each report contributes one row per workload: the fault kind, faults
injected, what the workload had acknowledged, and the checker's counts of lost records,
duplicates, aborted reads and other anomalies (``tests/fault/checks.py``).

Concurrency: a command-line tool.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tests.fault.checks import ANOMALIES

BEGIN, END = "<!-- fault-table:begin -->", "<!-- fault-table:end -->"
ROOT = Path(__file__).resolve().parents[2]

WORKLOAD_TITLES = {
    "producers": "1 idempotent producers",
    "group": "2 consumer group",
    "transactions": "3 transactions",
    "views": "4 consumers' view",
}


def _acknowledged(name: str, counts: dict[str, int]) -> str:
    if name == "producers":
        return f"{counts['acknowledged']:,} records"
    if name == "views":
        return f"{counts['records_read']:,} reads"
    if name == "group":
        return (
            f"{counts['commits_acknowledged']:,} commits, "
            f"{counts['records_processed']:,} records processed"
        )
    return (
        f"{counts['transactions_committed']:,} txns committed "
        f"({counts['records_read_committed']:,} records), "
        f"{counts['transactions_aborted']:,} aborted"
    )


def _lost(name: str, c: dict[str, int]) -> int:
    if name == "group":
        return c["lost_commits"] + c["skipped"]
    if name == "transactions":
        return c["lost"] + c["committed_missing"]
    return c.get("lost", 0)


def _duplicated(name: str, c: dict[str, int]) -> str:
    if name == "group":
        return f"0 ({c['processed_twice']:,} reprocessed: at-least-once)"
    text = str(c.get("duplicated", 0))
    if c.get("resent_after_client_epoch_bump"):
        text += (
            f" (+{c['resent_after_client_epoch_bump']:,} sent again by librdkafka under a "
            "bumped epoch, librdkafka#4953)"
        )
    return text


def _others(name: str, c: dict[str, int], crashes: int) -> str:
    counted = {"lost", "duplicated", "lost_commits", "skipped", "committed_missing"}
    counted.add("aborted_reads")
    found = {k: v for k, v in c.items() if k in ANOMALIES and k not in counted and v}
    if crashes:
        found["broker crashes"] = crashes
    text = ", ".join(f"{k} {v}" for k, v in found.items()) or "0"
    if c.get("client_hangs"):
        text += f" (client call hung at the end: {c['client_hangs']}, liveness)"
    return text


def rows(reports: list[dict[str, Any]]) -> list[str]:
    out = [
        "| workload | fault kind | faults injected | acknowledged | lost | duplicated "
        "| aborted reads | other anomalies | seed |",
        "|---|---|---:|---|---:|---|---:|---|---:|",
    ]
    order = list(WORKLOAD_TITLES)
    for name in order:
        for report in reports:
            counts = report.get("workloads", {}).get(name)
            if counts is None:
                continue
            kinds = report.get("kinds", [])
            kind = kinds[0] if len(kinds) == 1 else "mixed"
            crashes = len(report.get("broker_crashes", []))
            out.append(
                f"| {WORKLOAD_TITLES[name]} | {kind} | {report.get('faults_injected', 0)} "
                f"| {_acknowledged(name, counts)} | {_lost(name, counts)} "
                f"| {_duplicated(name, counts)} | {counts.get('aborted_reads', 0)} "
                f"| {_others(name, counts, crashes)} | {report.get('seed')} |"
            )
    totals: dict[str, int] = {}
    for report in reports:
        for kind in report.get("kinds", []):
            totals[kind] = totals.get(kind, 0)
        for event in report.get("faults", []):
            totals[event["kind"]] = totals.get(event["kind"], 0) + 1
    out.append("")
    out.append(
        f"Faults injected per workload: {sum(totals.values())} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(totals.items()))}); "
        f"every run's workloads ran at the same time, so each workload saw every fault."
    )
    return out


def load(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def update(out: Path, table: list[str]) -> None:
    text = out.read_text() if out.exists() else f"# Reliability\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    out.write_text(head + BEGIN + "\n" + "\n".join(table) + "\n" + END + tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reports", type=Path, default=ROOT / "reliability" / "faults")
    ap.add_argument("--out", type=Path, default=ROOT / "RELIABILITY.md")
    args = ap.parse_args()
    reports = load(args.reports)
    if not reports:
        raise SystemExit(f"no reports in {args.reports}: run make fault first")
    update(args.out, rows(reports))
    print(f"{args.out}: {len(reports)} report(s)")


if __name__ == "__main__":
    main()
