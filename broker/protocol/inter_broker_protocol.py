"""``inter.broker.protocol.version``: which versions of the inter-broker requests a broker
sends, as Kafka 3.9's ``MetadataVersion`` decides them in ZooKeeper mode.

A mixed or upgrading cluster agrees on the oldest protocol any broker speaks by setting
``inter.broker.protocol.version`` (IBP) on every broker; each broker then sends what that
IBP allows, whatever its own software could do. The values are Kafka's: ``0.8.0`` ..
``0.10.2-IV0``, ``0.11.0-IV2``, ``1.0``, ..., ``2.8-IV1``, ``3.0-IV0`` .. ``3.9-IV0``; a
version without its ``-IVn`` suffix means its newest one (``2.8`` is ``2.8-IV1``), and a
patch release means its minor one (``3.9.1`` is ``3.9``), as Kafka's
``MetadataVersion.fromVersionString`` reads them. The default is Kafka 3.9's, ``3.9-IV0``.

What depends on it here (Kafka 3.9's ``ControllerChannelManager`` and ``MetadataVersion``):

============================  ==========  ==========  ==========
IBP                           LeaderAndIsr UpdateMetadata StopReplica
============================  ==========  ==========  ==========
3.4-IV0 and newer             7           8           4
3.2-IV0 .. 3.3-IV3            6           7           3
2.8-IV1 .. 3.1-IV0            5           7           3
2.6-IV0 .. 2.8-IV0            4           6           3
2.4-IV1 .. 2.5-IV0            4           6           2
2.4-IV0                       3           5           1
2.2-IV0 .. 2.3-IV1            2           5           1
1.0-IV0 .. 2.1-IV2            1           4           0
0.10.2-IV0 .. 0.11.0-IV2      0           3           0
0.10.0-IV1 .. 0.10.1-IV2      0           2           0
0.9.0 .. 0.10.0-IV0           0           1           0
0.8.x                         0           0           0
============================  ==========  ==========  ==========

and whether a Kafka broker sends its ISR changes to the controller (AlterPartition, from
2.7-IV2) and asks it for producer ids (AllocateProducerIds, from 3.0-IV0): see
``docs/operations.md`` for what a Millrace broker does.

Concurrency: immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering

__all__ = ["DEFAULT", "IBP_VERSIONS", "InterBrokerProtocolVersion", "parse_ibp"]

IBP_VERSIONS: tuple[str, ...] = (
    "0.8.0",
    "0.8.1",
    "0.8.2",
    "0.9.0",
    "0.10.0-IV0",
    "0.10.0-IV1",
    "0.10.1-IV0",
    "0.10.1-IV1",
    "0.10.1-IV2",
    "0.10.2-IV0",
    "0.11.0-IV0",
    "0.11.0-IV1",
    "0.11.0-IV2",
    "1.0-IV0",
    "1.1-IV0",
    "2.0-IV0",
    "2.0-IV1",
    "2.1-IV0",
    "2.1-IV1",
    "2.1-IV2",
    "2.2-IV0",
    "2.2-IV1",
    "2.3-IV0",
    "2.3-IV1",
    "2.4-IV0",
    "2.4-IV1",
    "2.5-IV0",
    "2.6-IV0",
    "2.7-IV0",
    "2.7-IV1",
    "2.7-IV2",
    "2.8-IV0",
    "2.8-IV1",
    "3.0-IV0",
    "3.0-IV1",
    "3.1-IV0",
    "3.2-IV0",
    "3.3-IV0",
    "3.3-IV1",
    "3.3-IV2",
    "3.3-IV3",
    "3.4-IV0",
    "3.5-IV0",
    "3.5-IV1",
    "3.5-IV2",
    "3.6-IV0",
    "3.6-IV1",
    "3.6-IV2",
    "3.7-IV0",
    "3.7-IV1",
    "3.7-IV2",
    "3.7-IV3",
    "3.7-IV4",
    "3.8-IV0",
    "3.9-IV0",
)
"""Kafka 3.9's production metadata versions, oldest first (``MetadataVersion``)."""

_INDEX = {name: i for i, name in enumerate(IBP_VERSIONS)}
_ALIASES: dict[str, str] = {}
for _name in IBP_VERSIONS:  # "2.8" -> "2.8-IV1": a release names its newest IV
    _ALIASES[_name.split("-", 1)[0]] = _name


@total_ordering
@dataclass(frozen=True, slots=True)
class InterBrokerProtocolVersion:
    """One of :data:`IBP_VERSIONS`; ordered as Kafka orders them."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in _INDEX:
            raise ValueError(f"unknown inter.broker.protocol.version {self.name!r}")

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, InterBrokerProtocolVersion):
            return NotImplemented
        return _INDEX[self.name] < _INDEX[other.name]

    def at_least(self, name: str) -> bool:
        return _INDEX[self.name] >= _INDEX[name]

    def __str__(self) -> str:
        return self.name

    # --- what the controller sends (Kafka's ControllerChannelManager) -----------------------

    @property
    def leader_and_isr_version(self) -> int:
        for since, version in (
            ("3.4-IV0", 7),
            ("3.2-IV0", 6),
            ("2.8-IV1", 5),
            ("2.4-IV1", 4),
            ("2.4-IV0", 3),
            ("2.2-IV0", 2),
            ("1.0-IV0", 1),
        ):
            if self.at_least(since):
                return version
        return 0

    @property
    def update_metadata_version(self) -> int:
        for since, version in (
            ("3.4-IV0", 8),
            ("2.8-IV1", 7),
            ("2.4-IV1", 6),
            ("2.2-IV0", 5),
            ("1.0-IV0", 4),
            ("0.10.2-IV0", 3),
            ("0.10.0-IV1", 2),
            ("0.9.0", 1),
        ):
            if self.at_least(since):
                return version
        return 0

    @property
    def stop_replica_version(self) -> int:
        for since, version in (("3.4-IV0", 4), ("2.6-IV0", 3), ("2.4-IV1", 2), ("2.2-IV0", 1)):
            if self.at_least(since):
                return version
        return 0

    # --- what a Kafka broker of this IBP asks the controller --------------------------------

    @property
    def alter_partition_supported(self) -> bool:
        """Kafka brokers send their ISR changes to the controller (KIP-497)."""
        return self.at_least("2.7-IV2")

    @property
    def allocate_producer_ids_supported(self) -> bool:
        """Kafka brokers get producer ids from the controller (KIP-730)."""
        return self.at_least("3.0-IV0")


def parse_ibp(text: str) -> InterBrokerProtocolVersion:
    """Kafka's ``MetadataVersion.fromVersionString``: ``3.9``, ``3.9-IV0``, ``3.9.1``,
    ``0.10.0``, ``0.10.0-IV1``, ``0.10.0.1``. Raises ValueError naming the valid values."""
    value = text.strip()
    segments = value.split(".")
    count = 3 if value.startswith("0.") else 2
    key = value if count >= len(segments) else ".".join(segments[:count])
    name = key if key in _INDEX else _ALIASES.get(key)
    if name is None:
        raise ValueError(
            f"{text!r} is not a version Kafka 3.9 runs ({IBP_VERSIONS[0]} .. {IBP_VERSIONS[-1]}, "
            "e.g. 2.8, 3.4-IV0, 3.9)"
        )
    return InterBrokerProtocolVersion(name)


DEFAULT = InterBrokerProtocolVersion("3.9-IV0")
"""Kafka 3.9's default (``MetadataVersion.LATEST_PRODUCTION``)."""
