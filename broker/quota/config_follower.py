"""Keeps the broker's :class:`~broker.quota.manager.ClientQuotas` equal to the quota configs in
ZooKeeper, as Kafka's ``DynamicConfigManager`` does with its ``UserConfigHandler`` and
``ClientIdConfigHandler``: every entity is read at start-up (``/config/users/*``,
``/config/users/*/clients/*``, ``/config/clients/*``), then each ``/config/changes``
notification naming ``users/<user>``, ``clients/<client-id>`` or
``users/<user>/clients/<client-id>`` re-reads that entity.

ZooKeeper is reached through :class:`QuotaConfigSource` (the ZooKeeper client,
``broker.zk.client.ZkClient``, is one), so this floor imports nothing of ``broker.zk``.

Concurrency: as :class:`~broker.metadata.config_changes.ConfigChangeFollower`'s.
"""

from __future__ import annotations

from typing import Protocol

from broker.metadata.config_changes import ConfigChangeFollower, ConfigChangeSource
from broker.quota.entities import CLIENTS, USERS, QuotaEntity
from broker.quota.manager import ClientQuotas

__all__ = ["QuotaConfigFollower", "QuotaConfigSource"]


class QuotaConfigSource(ConfigChangeSource, Protocol):
    """The ZooKeeper operations the quota follower uses: the config changes', and reading
    the user and client entities' configs."""

    async def list_entities(self, entity_type: str) -> list[str]:
        """The (sanitized) names under ``/config/<entity_type>``."""
        ...

    async def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        """``/config/<entity_type>/<name>``'s config (empty if none)."""
        ...


class QuotaConfigFollower(ConfigChangeFollower[QuotaConfigSource]):
    """Loads the quota configs and follows their change notifications."""

    name = "quota-config-changes"

    def __init__(self, zk: QuotaConfigSource, quotas: ClientQuotas) -> None:
        super().__init__(zk)
        self.quotas = quotas

    async def load_all(self) -> None:
        """Read every quota entity (and forget those that are gone)."""
        zk = self._zk
        present: set[QuotaEntity] = set()
        for user in await zk.list_entities(USERS):
            present.add(await self.reload(QuotaEntity(user, None)))
            for client in await zk.list_entities(f"{USERS}/{user}/{CLIENTS}"):
                present.add(await self.reload(QuotaEntity(user, client)))
        for client in await zk.list_entities(CLIENTS):
            present.add(await self.reload(QuotaEntity(None, client)))
        self.quotas.remove_missing(present)

    async def reload(self, entity: QuotaEntity) -> QuotaEntity:
        kind, name = entity.config_path()
        self.quotas.apply(entity, await self._zk.get_entity_config(kind, name))
        return entity

    async def changed(self, entity_path: str) -> None:
        entity = QuotaEntity.from_entity_path(entity_path)
        if entity is not None:
            await self.reload(entity)
