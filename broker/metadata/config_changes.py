"""Following ``/config/changes`` for entity configs, as Kafka's ``DynamicConfigManager``
does for its config handlers: a follower loads every entity it cares about at start, then
re-reads one entity for each new ``config_change_<seq>`` notification naming it
(``{"version":2,"entity_path":"users/alice"}``). The first notification list seen after the
watch is set triggers one more full load, in case a change landed between the start-up load
and the watch.

Subclasses say what to load (:meth:`ConfigChangeFollower.load_all`) and what an entity path
means to them (:meth:`ConfigChangeFollower.changed`): the SCRAM credential cache and the
client quotas.

ZooKeeper is reached through :class:`ConfigChangeSource`, the two operations a follower needs
(the ZooKeeper client, ``broker.zk.client.ZkClient``, and the tests' fake have
them); a subclass names the client type it reads its entities with
(``ConfigChangeFollower[ZkClient]``), so this floor never imports the controller's.

Concurrency: runs on the broker's event loop; one task per follower handles the
notifications (a burst is processed once, in order); a failure is logged and the next
notification retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["ConfigChange", "ConfigChangeFollower", "ConfigChangeSource", "Watch"]

log = logging.getLogger(__name__)


class Watch(Protocol):
    """A registered watch (``WatchHandle``): cancelling it stops the callbacks."""

    def cancel(self) -> None: ...


class ConfigChange(Protocol):
    """One ``/config/changes/config_change_<seq>`` notification."""

    @property
    def entity_path(self) -> str:
        """``topics/t``, ``users/alice``, ``clients/c1``, ..."""
        ...


class ConfigChangeSource(Protocol):
    """The ZooKeeper operations that following ``/config/changes`` needs."""

    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> Watch:
        """Call ``callback`` on the loop with the notification names, now and on every
        change."""
        ...

    async def get_config_change(self, name: str) -> ConfigChange | None:
        """The notification ``name`` (None: gone)."""
        ...


SourceT = TypeVar("SourceT", bound=ConfigChangeSource)


class ConfigChangeFollower(Generic[SourceT]):
    """Loads entity configs and follows their change notifications (subclass it; ``SourceT``
    is the ZooKeeper client type the subclass reads its entities with)."""

    name = "config-changes"

    def __init__(self, zk: SourceT) -> None:
        self._zk = zk
        self._seen: set[str] | None = None
        self._latest: list[str] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Watch | None = None

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
