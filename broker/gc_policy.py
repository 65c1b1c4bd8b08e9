"""Garbage collection for a long-running broker process.

A broker holds a large, long-lived object graph (thousands of partitions, each with its log,
segments, indexes and replication state: ~70 objects a partition, 200,000 objects for 3,000
partitions) and churns short-lived request objects on top of it. CPython's full (generation 2)
collection scans all of it, and it runs whenever the objects promoted since the last one reach
a quarter of the old ones: at 3,000 idle partitions that was a 115 ms pause of the event loop
every 15-20 s (measured with ``gc.callbacks``; every pause collected nothing), stalling every
request in flight and a fair share of an idle broker's CPU.

The policy (:func:`install`, called by ``millrace broker start`` only, never in a process that
merely imports the broker, such as the tests): after each full collection, every object that
survived it is moved to the permanent generation (``gc.freeze()``), so the next full
collections scan only what was created since. Objects in the permanent generation are still
freed by reference counting; only a *cycle* among them that becomes garbage would stay, so
:func:`refresh` (``gc.unfreeze()``, every ``REFRESH_S`` seconds from the broker's scheduler)
hands everything back to the collector: the next full collection sees the whole heap once,
frees such cycles, and freezes the survivors again.

Concurrency: process-wide state of the ``gc`` module; call from the event loop thread.
"""

from __future__ import annotations

import gc
from typing import Any

REFRESH_S = 600.0
"""How often the permanent generation is handed back to the collector."""

_installed = False


def _after_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def install() -> None:
    """Freeze the survivors of every full collection (idempotent)."""
    global _installed
    if not _installed:
        gc.callbacks.append(_after_collection)
        _installed = True


def uninstall() -> None:
    """Undo :func:`install` and return every frozen object to the collector."""
    global _installed
    if _installed:
        gc.callbacks.remove(_after_collection)
        _installed = False
    gc.unfreeze()


def refresh() -> None:
    """Return the frozen objects to the collector (the next full collection re-freezes)."""
    gc.unfreeze()
