"""Brokers that restarted while no controller was watching (pure functions).

A controller sees a broker bounce as a change of its broker epoch (the czxid of its
``/brokers/ids/<id>`` registration, KIP-380) and runs the failure step, then the start-up
step. A bounce during a controller fail-over is seen by nobody: the new controller reads a
registration that is already the new one. Its partition states still name the broker as
leader or in-sync replica on the strength of a decision taken before it restarted, though
its log may have lost an unflushed or damaged tail in recovery (found by the fault harness:
a restarted broker whose recovery had cut its log kept leading, and its followers truncated
acknowledged records to match it).

Both are zxids of the same ZooKeeper ensemble, so they compare: a live broker registered
after the last write of the state of a partition whose ISR names it has restarted (or lost
its session) since that state was decided.

Concurrency: pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.controller import znodes
from broker.types import TopicPartition


def restarted_since_last_write(
    states: Mapping[TopicPartition, znodes.PartitionState],
    state_zxids: Mapping[TopicPartition, int],
    broker_epochs: Mapping[int, int],
) -> set[int]:
    """The live brokers (``broker_epochs``) registered after the last write (``state_zxids``,
    -1: unknown, skipped) of a partition state whose ISR holds them."""
    bounced: set[int] = set()
    for tp, st in states.items():
        written = state_zxids.get(tp, -1)
        if written < 0:
            continue
        for broker_id in st.isr:
            epoch = broker_epochs.get(broker_id)
            if epoch is not None and epoch > written:
                bounced.add(broker_id)
    return bounced
