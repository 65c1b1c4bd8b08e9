"""The broker's cache of SCRAM credentials, from ``/config/users/<user>`` (Kafka's
``CredentialCache`` fed by the ``/config/changes`` notifications naming ``users/<user>``).

ZooKeeper is reached through :class:`UserConfigSource` (the ZooKeeper client,
``broker.zk.client.ZkClient``, is one), so this floor imports nothing of ``broker.zk``.

Concurrency: read and updated on the broker's event loop; following the notifications as
:class:`~broker.metadata.config_changes.ConfigChangeFollower` does.
"""

from __future__ import annotations

import logging
from typing import Protocol

from broker.metadata.config_changes import ConfigChangeFollower, ConfigChangeSource
from broker.quota.entities import desanitize, sanitize
from kafka_security.scram import CredentialFormatError, ScramCredential, user_credentials

log = logging.getLogger(__name__)

USERS = "users"


class UserConfigSource(ConfigChangeSource, Protocol):
    """The ZooKeeper operations the credential cache uses: the config changes', and reading
    the user entities' configs."""

    async def list_entities(self, entity_type: str) -> list[str]:
        """The (sanitized) names under ``/config/<entity_type>``."""
        ...

    async def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        """``/config/<entity_type>/<name>``'s config (empty if none)."""
        ...


class CredentialCache(ConfigChangeFollower[UserConfigSource]):
    """SCRAM credentials by (mechanism, user), kept current from ZooKeeper."""

    name = "user-config-changes"

    def __init__(self, zk: UserConfigSource) -> None:
        super().__init__(zk)
        self._credentials: dict[str, dict[str, ScramCredential]] = {}

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._credentials.items()}

    async def load_all(self) -> None:
        for entity in await self._zk.list_entities(USERS):
            await self.reload(desanitize(entity))

    async def reload(self, user: str) -> None:
        """Re-read ``user``'s credentials (its znode name is Kafka's sanitized form)."""
        config = await self._zk.get_entity_config(USERS, sanitize(user))
        try:
            creds = user_credentials(config)
        except CredentialFormatError as exc:
            log.warning("ignoring the SCRAM credentials of user %s: %s", user, exc)
            creds = {}
        if creds:
            self._credentials[user] = creds
        else:
            self._credentials.pop(user, None)

    async def changed(self, entity_path: str) -> None:
        entity = entity_path.removeprefix(f"{USERS}/")
        # users/<user>/clients/<id> is a quota, not a credential; clients/... neither
        if entity_path.startswith(f"{USERS}/") and "/" not in entity:
            await self.reload(desanitize(entity))
