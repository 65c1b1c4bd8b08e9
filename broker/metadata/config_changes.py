"""Following ``/config/changes`` for entity configs, as Kafka's ``DynamicConfigManager``
does for its config handlers: a follower loads every entity it cares about at start, then
re-reads one entity for each new ``config_change_<seq>`` notification naming it
(``{"version":2,"entity_path":"users/alice"}``). The first notification list seen after the
watch is set triggers one more full load, in case a change landed between the start-up load
and the watch.

Subclasses say what to load (:meth:`ConfigChangeFollower.load_all`) and what an entity path
means to them (:meth:`ConfigChangeFollower.changed`): the SCRAM credential cache and the
client quotas.

Concurrency: runs on the broker's event loop; one task per follower handles the
notifications (a burst is processed once, in order); a failure is logged and the next
notification retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.controller.zk_client import ZkClient
    from broker.controller.zk_interface import WatchHandle

log = logging.getLogger(__name__)


class ConfigChangeFollower:
    """Loads entity configs and follows their change notifications (subclass it)."""

    name = "config-changes"

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk
        self._seen: set[str] | None = None
        self._latest: list[str] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: WatchHandle | None = None

    async def load_all(self) -> None:
        """Read every entity this follower keeps."""
        raise NotImplementedError

    async def changed(self, entity_path: str) -> None:
        """A notification named ``entity_path`` (``users/alice``, ``clients/c1``, ...)."""
        raise NotImplementedError

    async def start(self) -> None:
        await self.load_all()
        self._task = asyncio.create_task(self._follow(), name=self.name)
        self._watch = await self._zk.watch_config_changes(self._on_changes)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

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
                log.exception("%s: processing config change notifications failed", self.name)

    async def _process(self, names: list[str]) -> None:
        seen, self._seen = self._seen, set(names)
        if seen is None:
            await self.load_all()
            return
        for name in names:
            if name in seen:
                continue
            node = await self._zk.get_config_change(name)
            if node is not None:
                await self.changed(node.entity_path)
