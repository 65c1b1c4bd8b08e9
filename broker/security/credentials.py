"""The broker's cache of SCRAM credentials, from ``/config/users/<user>`` (Kafka's
``CredentialCache`` fed by the ``/config/changes`` notifications naming ``users/<user>``).

Concurrency: read and updated on the broker's event loop; one task follows the
notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from broker.security.scram import CredentialFormatError, ScramCredential, user_credentials

if TYPE_CHECKING:
    from broker.controller.zk_client import ZkClient

log = logging.getLogger(__name__)

USERS = "users"


class CredentialCache:
    """SCRAM credentials by (mechanism, user), kept current from ZooKeeper."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk
        self._credentials: dict[str, dict[str, ScramCredential]] = {}
        self._seen: set[str] | None = None
        self._latest: list[str] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._credentials.items()}

    async def start(self) -> None:
        for user in await self._zk.list_entities(USERS):
            await self.reload(user)
        self._task = asyncio.create_task(self._follow(), name="user-config-changes")
        await self._zk.watch_config_changes(self._on_changes)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def reload(self, user: str) -> None:
        config = await self._zk.get_entity_config(USERS, user)
        try:
            creds = user_credentials(config)
        except CredentialFormatError as exc:
            log.warning("ignoring the SCRAM credentials of user %s: %s", user, exc)
            creds = {}
        if creds:
            self._credentials[user] = creds
        else:
            self._credentials.pop(user, None)

    def _on_changes(self, names: list[str]) -> None:
        self._latest = names
        self._wake.set()

    async def _follow(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            names, self._latest = self._latest, None
            if names is None:
                continue
            try:
                await self._process(names)
            except Exception:  # the next notification retries
                log.exception("processing user config changes failed")

    async def _process(self, names: list[str]) -> None:
        seen, self._seen = self._seen, set(names)
        if seen is None:
            # first call: reload everyone, in case a change landed between the start-up
            # load and the watch
            for user in await self._zk.list_entities(USERS):
                await self.reload(user)
            return
        for name in names:
            if name in seen:
                continue
            node = await self._zk.get_config_change(name)
            if node is None or not node.entity_path.startswith(f"{USERS}/"):
                continue
            user = node.entity_path.removeprefix(f"{USERS}/")
            if "/" not in user:  # users/<user>/clients/<id>: a quota, not a credential
                await self.reload(user)
