"""Exactly-once writes of the ``millrace`` sink: Kafka transactions opened by the write tasks,
committed by the driver, then the micro-batch's source offsets. The protocol, and what
happens under every fault, is ``docs/exactly-once.md``; the modules:

* :mod:`~spark_connector.exactly_once.settings`: the options, the sink's names;
* :mod:`~spark_connector.exactly_once.sink_log`: the sink's own log next to Spark's
  checkpoint (its id, the driver run that owns it, one record per batch);
* :mod:`~spark_connector.exactly_once.planning`: the driver's planning of a batch (step 1);
* :mod:`~spark_connector.exactly_once.task`: the task side (step 2);
* :mod:`~spark_connector.exactly_once.committer`: the driver's commit and abort (steps 3, 4);
* :mod:`~spark_connector.exactly_once.offsets`: source offsets from Spark's offset log;
* :mod:`~spark_connector.exactly_once.foreach_batch`: ``write_batch`` for ``foreachBatch``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_connector.exactly_once.committer import Committer, DriverFenced
    from spark_connector.exactly_once.offsets import commit_batch_offsets, source_offsets
    from spark_connector.exactly_once.settings import (
        DELIVERY_GUARANTEE_OPTION,
        SINK_LOG_DIR,
        ExactlyOnce,
        ExactlyOnceError,
        SinkOptions,
        checkpoint_dir,
        parse_sink_options,
    )
    from spark_connector.exactly_once.sink_log import BatchRecord, SinkLog, TaskEntry

__all__ = [
    "DELIVERY_GUARANTEE_OPTION",
    "SINK_LOG_DIR",
    "BatchRecord",
    "Committer",
    "DriverFenced",
    "ExactlyOnce",
    "ExactlyOnceError",
    "SinkLog",
    "SinkOptions",
    "TaskEntry",
    "checkpoint_dir",
    "commit_batch_offsets",
    "parse_sink_options",
    "source_offsets",
]

# Imported on first use (PEP 562): a module of the package (the boundaries a reader or
# ``millrace table`` needs) is imported without the committer and PySpark.
_LAZY = {
    "Committer": "committer",
    "DriverFenced": "committer",
    "commit_batch_offsets": "offsets",
    "source_offsets": "offsets",
    "DELIVERY_GUARANTEE_OPTION": "settings",
    "SINK_LOG_DIR": "settings",
    "ExactlyOnce": "settings",
    "ExactlyOnceError": "settings",
    "SinkOptions": "settings",
    "checkpoint_dir": "settings",
    "parse_sink_options": "settings",
    "BatchRecord": "sink_log",
    "SinkLog": "sink_log",
    "TaskEntry": "sink_log",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_connector.exactly_once' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"spark_connector.exactly_once.{module}"), name)
    globals()[name] = value
    return value
