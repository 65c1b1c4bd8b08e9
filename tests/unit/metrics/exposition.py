"""Render collector output the way the endpoint does (prometheus_client's text format) and
parse it back, so tests check the names a scraper sees (``_total`` suffixes included)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def scrape(families: Iterable[Metric]) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> sorted label pairs -> value, after a text-format round trip."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families)))
    text = generate_latest(registry).decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str
) -> float | None:
    """One sample's value, None when absent."""
    return samples.get(name, {}).get(tuple(sorted(labels.items())))
