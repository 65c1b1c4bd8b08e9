"""What one benchmark run measured, as plain data: a list of :class:`Measurement` saved as
JSON (``benchmarks/results.json``) so the report and plots can be rendered again without
re-running (``python -m bench.report``).

A measurement is one run of one case of one workload on one system, with its metrics
(``records/s``, ``MB/s``, ``p99 ms``, ...) and the brokers' CPU seconds and peak RSS over
that run. Medians are taken over runs of the same (workload, case, system).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.procstat import Usage

SYSTEMS = ("Kafka", "Millrace")


@dataclass
class Measurement:
    workload: str
    case: str
    system: str
    metrics: dict[str, float]
    cpu_s: float = 0.0
    peak_rss_mib: float = 0.0
    seconds: float = 0.0

    @classmethod
    def of(
        cls, workload: str, case: str, system: str, metrics: dict[str, float], usage: Usage
    ) -> Measurement:
        return cls(workload, case, system, metrics, usage.cpu_s, usage.peak_rss_mib, usage.seconds)


@dataclass
class Run:
    """A whole benchmark run: its context (machine, versions, limits, parameters) and
    measurements."""

    context: dict[str, Any] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list)

    def add(self, m: Measurement) -> None:
        self.measurements.append(m)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"context": self.context, "measurements": [asdict(m) for m in self.measurements]}
        path.write_text(json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Run:
        data = json.loads(path.read_text())
        return cls(data["context"], [Measurement(**m) for m in data["measurements"]])

    def select(self, workload: str, case: str, system: str) -> list[Measurement]:
        return [
            m
            for m in self.measurements
            if m.workload == workload and m.case == case and m.system == system
        ]

    def cases(self, workload: str) -> list[str]:
        seen: dict[str, None] = {}
        for m in self.measurements:
            if m.workload == workload:
                seen.setdefault(m.case, None)
        return list(seen)

    def median(self, workload: str, case: str, system: str, metric: str) -> float | None:
        values = [
            m.metrics[metric] for m in self.select(workload, case, system) if metric in m.metrics
        ]
        return statistics.median(values) if values else None

    def median_usage(self, workload: str, case: str, system: str) -> tuple[float, float] | None:
        ms = self.select(workload, case, system)
        if not ms:
            return None
        return (
            statistics.median(m.cpu_s for m in ms),
            statistics.median(m.peak_rss_mib for m in ms),
        )
