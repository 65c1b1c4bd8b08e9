"""The offset map of one cleaning round: record key -> offset of its latest record.

Built from the *dirty* section of a log (``[first dirty offset, upper bound)``), then used to
decide, for every record from the log start to the end of the mapped section, whether a
later record has the same key. ``latest_offset`` is the last offset the map covers: records
after it are kept whatever their key (they were not mapped).

Capacity follows Kafka's ``log.cleaner.dedupe.buffer.size``: Kafka's map spends 24 bytes per
entry (an MD5 hash and an offset) and fills to ``log.cleaner.io.buffer.load.factor`` (0.9),
so a buffer of B bytes shared by T cleaner threads maps ``B / T / 24 * 0.9`` keys per round.
This map keeps the same number of entries (so a round covers the same share of the log as
Kafka's would), but keys exactly, as bytes: no hash collision can ever drop a live record.
A Python dict entry costs about 100 bytes plus the key.

This is the reference map of the Python cleaner. Rounds normally use its native twin,
``_native_cleaner.OffsetMap`` (see :mod:`broker.log.cleaner.native`): the same capacity and
the same exact keys, in an open-addressing table of 40-byte slots (a key of up to 16 bytes
held in its slot, longer keys in an arena), filled and queried by C loops over whole batches.

Concurrency: owned by one cleaning round in one worker process.
"""

from __future__ import annotations

__all__ = ["BYTES_PER_ENTRY", "OffsetMap", "map_capacity"]

BYTES_PER_ENTRY = 24  # Kafka's SkimpyOffsetMap: 16-byte MD5 + 8-byte offset


def map_capacity(dedupe_buffer_size: int, cleaner_threads: int, load_factor: float) -> int:
    """Keys one cleaning round may map (Kafka's ``slots * dupBufferLoadFactor``)."""
    per_thread = dedupe_buffer_size // max(cleaner_threads, 1)
    return max(int(per_thread // BYTES_PER_ENTRY * load_factor), 1)


class OffsetMap:
    """key -> latest offset, with ``latest_offset`` the end of the mapped section."""

    __slots__ = ("_map", "capacity", "latest_offset")

    def __init__(self, capacity: int) -> None:
        self._map: dict[bytes, int] = {}
        self.capacity = capacity
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._map[key] = offset

    def get(self, key: bytes) -> int:
        """The latest mapped offset of ``key``, -1 when it is not mapped."""
        return self._map.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)
