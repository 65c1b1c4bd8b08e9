"""The broker's cache of SCRAM credentials, from ``/config/users/<user>`` (Kafka's
``CredentialCache`` fed by the ``/config/changes`` notifications naming ``users/<user>``).

Concurrency: read and updated on the broker's event loop; following the notifications as
:class:`~broker.metadata.config_changes.ConfigChangeFollower` does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.metadata.config_changes import ConfigChangeFollower
from broker.quota.entities import desanitize, sanitize
from kafka_security.scram import CredentialFormatError, ScramCredential, user_credentials

if TYPE_CHECKING:
    from broker.zk.client import ZkClient

log = logging.getLogger(__name__)

USERS = "users"


class CredentialCache(ConfigChangeFollower["ZkClient"]):
    """SCRAM credentials by (mechanism, user), kept current from ZooKeeper."""

    name = "user-config-changes"

    def __init__(self, zk: ZkClient) -> None:
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
