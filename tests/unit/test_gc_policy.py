"""The broker process's garbage-collection policy (broker/gc_policy.py): survivors of a full
collection are frozen, and a refresh hands them back so a cycle among them is still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from broker import gc_policy

pytestmark = pytest.mark.unit


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_survivors_are_frozen_and_refresh_frees_frozen_cycles() -> None:
    gc_policy.install()
    gc_policy.install()  # idempotent
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle, alive for now
        gone = weakref.ref(a)
        gc.collect()
        assert gc.get_freeze_count() > 0
        del a, b
        gc.collect()
        assert gone() is not None  # frozen: the collector no longer looks at it
        gc_policy.refresh()
        gc.collect()
        assert gone() is None
    finally:
        gc_policy.uninstall()
    assert gc.get_freeze_count() == 0
    assert gc_policy._after_collection not in gc.callbacks
