"""The exactly-once sink's own log, next to Spark's checkpoint (``docs/exactly-once.md``).

Files of one sink directory:

* ``sink.json``: ``{"sink_id": "<16 hex>", "created_ms": ...}``, made once (an exclusive
  create: a second driver starting at the same moment reads the first one's);
* ``run.json``: the driver run that owns the sink, ``{"run": "<ms>-<nonce>", "driver":
  [transactional id, producer id, epoch], "host": ..., "pid": ...}``; run names sort by the
  time the run started, so the newer of two runs is the greater name;
* ``<N>.json``: batch ``N`` (format version 2)::

    {"version": 2, "batch": N, "state": "prepared" | "committed" | "partial" | "failed",
     "run": "<run>", "group": G | null, "offsets": {topic: {partition: offset}},
     "counts": {topic: partitions}, "partitions": <Spark partitions of the batch>,
     "error": "...",
     "tasks": [{"partition": p, "attempt": a, "rows": n,
                "state": "open" | "committed" | "lost" | "empty",
                "txn": [id, producer id, epoch] | null,      # the pair that ends it
                "wrote": [id, producer id, epoch] | null,    # the pair that wrote it
                "outputs": [[topic, partition, first offset, end offset], ...]}]}

  Records of the first format (no ``version``: ``transactions`` as ``[id, pid, epoch]``
  lists, written before sinks had ids) are read as version 2 with unknown partitions.

Every write is atomic (temporary file, fsync, rename or link, fsync of the directory); a
batch record is *created* with ``os.link``, which fails when another driver created it first
(:meth:`SinkLog.create`). The last :data:`KEEP_BATCHES` records are kept.

Concurrency: a log is used by one thread of one process at a time; two processes (two drivers)
are ordered by the exclusive creates and by ``run.json`` (``docs/exactly-once.md``, step 3.1).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_connector.kafka.transactions import OpenTransaction

__all__ = [
    "KEEP_BATCHES",
    "BatchRecord",
    "RunRecord",
    "SinkLog",
    "TaskEntry",
    "new_run_name",
]

KEEP_BATCHES = 100  # as Spark's spark.sql.streaming.minBatchesToRetain
SINK_FILE = "sink.json"
RUN_FILE = "run.json"
PREPARED, COMMITTED, PARTIAL, FAILED = "prepared", "committed", "partial", "failed"
OPEN, DONE, LOST, EMPTY = "open", "committed", "lost", "empty"


_last_run_ms = 0
_run_name_lock = threading.Lock()


def new_run_name() -> str:
    """A driver run's name: its start time in ms (zero-padded, so names sort by start) and a
    random nonce. Within a process the time part strictly increases, so a later run sorts
    after an earlier one even when both start in the same millisecond."""
    global _last_run_ms
    with _run_name_lock:
        ms = max(int(time.time() * 1000), _last_run_ms + 1)
        _last_run_ms = ms
    return f"{ms:013d}-{uuid.uuid4().hex[:12]}"


@dataclass(slots=True)
class TaskEntry:
    """One write task's transaction in a batch record (see the module docstring)."""

    partition: int
    rows: int
    state: str
    txn: OpenTransaction | None = None
    wrote: OpenTransaction | None = None
    outputs: list[tuple[str, int, int, int]] = field(default_factory=list)
    attempt: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "attempt": self.attempt,
            "rows": self.rows,
            "state": self.state,
            "txn": None if self.txn is None else self.txn.as_list(),
            "wrote": None if self.wrote is None else self.wrote.as_list(),
            "outputs": [list(o) for o in self.outputs],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskEntry:
        return cls(
            int(data["partition"]),
            int(data["rows"]),
            str(data["state"]),
            None if data.get("txn") is None else OpenTransaction.from_list(data["txn"]),
            None if data.get("wrote") is None else OpenTransaction.from_list(data["wrote"]),
            [(str(o[0]), int(o[1]), int(o[2]), int(o[3])) for o in data.get("outputs") or []],
            int(data.get("attempt", 0)),
        )


@dataclass(slots=True)
class BatchRecord:
    """One batch in the sink's log (see the module docstring)."""

    batch: int
    state: str
    run: str = ""
    tasks: list[TaskEntry] = field(default_factory=list)
    group: str | None = None
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    partitions: int = -1
    error: str = ""

    @property
    def committed(self) -> bool:
        return self.state == COMMITTED

    def entry(self, partition: int) -> TaskEntry | None:
        for task in self.tasks:
            if task.partition == partition:
                return task
        return None

    def transactional_ids(self) -> set[str]:
        return {t.txn.transactional_id for t in self.tasks if t.txn is not None}

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": 2,
                "batch": self.batch,
                "state": self.state,
                "run": self.run,
                "group": self.group,
                "offsets": {
                    topic: {str(p): o for p, o in sorted(parts.items())}
                    for topic, parts in sorted(self.offsets.items())
                },
                "counts": dict(sorted(self.counts.items())),
                "partitions": self.partitions,
                "error": self.error,
                "tasks": [t.to_json() for t in sorted(self.tasks, key=lambda t: t.partition)],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> BatchRecord:
        data = json.loads(text)
        offsets = {
            str(topic): {int(p): int(o) for p, o in parts.items()}
            for topic, parts in (data.get("offsets") or {}).items()
        }
        if "version" not in data:  # the first format
            state = str(data["state"])
            tasks = [
                TaskEntry(
                    -1 - i,
                    -1,
                    DONE if state == COMMITTED else OPEN,
                    OpenTransaction.from_list(t),
                    OpenTransaction.from_list(t),
                )
                for i, t in enumerate(data.get("transactions") or [])
            ]
            return cls(int(data["batch"]), state, "", tasks, data.get("group"), offsets)
        return cls(
            int(data["batch"]),
            str(data["state"]),
            str(data.get("run") or ""),
            [TaskEntry.from_json(t) for t in data.get("tasks") or []],
            data.get("group"),
            offsets,
            {str(k): int(v) for k, v in (data.get("counts") or {}).items()},
            int(data.get("partitions", -1)),
            str(data.get("error") or ""),
        )


@dataclass(frozen=True, slots=True)
class RunRecord:
    """``run.json``: the driver run that owns the sink and its driver transaction's pair."""

    run: str
    driver: OpenTransaction
    host: str = ""
    pid: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {"run": self.run, "driver": self.driver.as_list(), "host": self.host, "pid": self.pid}
        )

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        return cls(
            str(data["run"]),
            OpenTransaction.from_list(data["driver"]),
            str(data.get("host") or ""),
            int(data.get("pid") or 0),
        )

    @classmethod
    def mine(cls, run: str, driver: OpenTransaction) -> RunRecord:
        return cls(run, driver, socket.gethostname(), os.getpid())


class SinkLog:
    """One sink's directory (see the module docstring)."""

    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)

    # --- files -----------------------------------------------------------------------------

    def _path(self, batch: int) -> Path:
        return self.dir / f"{batch}.json"

    def _temporary(self, name: str, text: str) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return tmp

    def _sync_dir(self) -> None:
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _replace(self, path: Path, text: str) -> None:
        tmp = self._temporary(path.name, text)
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self._sync_dir()

    def _create(self, path: Path, text: str) -> bool:
        """Create ``path`` with ``text`` unless it exists (atomically): whether it was."""
        tmp = self._temporary(path.name, text)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._sync_dir()
        return True

    # --- the sink id and its run -----------------------------------------------------------

    def sink_id(self) -> str:
        """The sink's id, made (16 random hex digits) the first time."""
        path = self.dir / SINK_FILE
        for _ in range(3):
            try:
                return str(json.loads(path.read_text())["sink_id"])
            except FileNotFoundError:
                text = json.dumps(
                    {"sink_id": uuid.uuid4().hex[:16], "created_ms": int(time.time() * 1000)}
                )
                self._create(path, text)
            except (ValueError, KeyError) as exc:
                raise OSError(f"{path} is not a sink id file: {exc}") from exc
        raise OSError(f"cannot create {path}")

    def run(self) -> RunRecord | None:
        try:
            return RunRecord.from_json((self.dir / RUN_FILE).read_text())
        except FileNotFoundError:
            return None

    def put_run(self, record: RunRecord) -> None:
        self._replace(self.dir / RUN_FILE, record.to_json())

    # --- batch records ---------------------------------------------------------------------

    def batches(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        return sorted(
            int(entry.stem)
            for entry in self.dir.iterdir()
            if entry.suffix == ".json" and entry.stem.isdigit()
        )

    def legacy_through(self) -> int:
        """For a ``write_batch`` sink (``.../millrace-sink/sinks/<name>``): the highest batch
        of the records the connector kept in ``.../millrace-sink`` before sinks had their own
        directories (-1 when there are none)."""
        if self.dir.parent.name != "sinks":
            return -1
        legacy = SinkLog(str(self.dir.parent.parent)).batches()
        return legacy[-1] if legacy else -1

    def committed_through(self) -> int:
        """The highest batch the log holds, in any state (-1: none)."""
        batches = self.batches()
        own = batches[-1] if batches else -1
        return own if own >= 0 else self.legacy_through()

    def get(self, batch: int) -> BatchRecord | None:
        try:
            return BatchRecord.from_json(self._path(batch).read_text())
        except FileNotFoundError:
            return None

    def latest(self) -> BatchRecord | None:
        batches = self.batches()
        return self.get(batches[-1]) if batches else None

    def forget(self, batch: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(batch).unlink()
        with contextlib.suppress(FileNotFoundError):
            self._sync_dir()

    def put(self, record: BatchRecord) -> None:
        """Write (or overwrite) ``record``; older records beyond :data:`KEEP_BATCHES` go."""
        self._replace(self._path(record.batch), record.to_json())
        self._trim()

    def create(self, record: BatchRecord) -> bool:
        """Write ``record`` unless its batch already has one: whether it was written."""
        created = self._create(self._path(record.batch), record.to_json())
        if created:
            self._trim()
        return created

    def _trim(self) -> None:
        for old in self.batches()[:-KEEP_BATCHES]:
            with contextlib.suppress(FileNotFoundError):
                self._path(old).unlink()
