"""Every broker's view of the topic-config overrides (Kafka's ``DynamicConfigManager`` with its
``TopicConfigHandler``, ZooKeeper mode).

Theory of operation: a topic's overrides live in ``/config/topics/<topic>``
(``{"version":1,"config":{"retention.ms":"100000"}}``). Whoever changes them (any broker, for
AlterConfigs / IncrementalAlterConfigs) writes that znode and then a sequential
``/config/changes/config_change_<seq>`` notification naming ``topics/<topic>``. Each broker
reads every topic's overrides at start-up (before its logs are opened, so each log starts
with its topic's configuration), follows ``/config/changes``, and on each new notification
re-reads the topic's overrides and hands the new effective
:class:`~broker.topic_config.LogConfig` to its listeners (the replica manager applies it to
the logs it hosts). A topic seen for the first time (LeaderAndIsr for a new topic, a
controller loading a topic) is loaded on demand with :meth:`TopicConfigManager.ensure_loaded`.
A stored override that no longer validates is ignored with a warning (the broker's defaults
apply), as Kafka does.

The effective config of a topic is the broker's topic defaults (``log.*`` properties) with
the topic's overrides on top (:meth:`TopicConfigManager.log_config_for`).

Concurrency: event loop only. Notifications are processed by one task that :meth:`start`
creates and :meth:`stop` cancels; a burst of notifications is coalesced (the worker always
handles the newest list of change znodes, skipping the names it has already handled).
Validation (:func:`validate_configs`, the rule the controller's CreateTopics applies too):
every override must parse as the topic config it names (:mod:`broker.topic_config`); a null
value means "use the default" and is dropped. A failure is :class:`InvalidConfigError`
(INVALID_CONFIG), naming the property.

ZooKeeper is reached only through :class:`TopicConfigStore`, the operations this manager
needs (``broker.zk.interface.ZkOperations`` has them), so this floor never
imports the controller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from broker.config_def import ConfigError
from broker.metadata.config_changes import ConfigChangeSource
from broker.protocol.errors import ErrorCode, KafkaError
from broker.topic_config import LogConfig, parse_topic_overrides

__all__ = [
    "ConfigListener",
    "InvalidConfigError",
    "TopicConfigManager",
    "TopicConfigStore",
    "TopicDefaults",
    "validate_configs",
]

log = logging.getLogger(__name__)

TOPIC_ENTITY_PREFIX = "topics/"
"""The ``entity_path`` prefix of a topic's config-change notification."""

ConfigListener = Callable[[str, LogConfig], None]
"""Called with (topic, new effective config) after a topic's overrides changed."""


class InvalidConfigError(KafkaError):
    """A topic config override that does not parse (INVALID_CONFIG)."""

    code = ErrorCode.invalid_config


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate topic config overrides; a null value means "use the default"."""
    clean = {k: v for k, v in configs.items() if v is not None}
    try:
        parse_topic_overrides(clean)
    except ConfigError as exc:
        raise InvalidConfigError(str(exc)) from exc
    return clean


class TopicDefaults(Protocol):
    """The broker's topic defaults (``BrokerConfig``: the ``log.*`` properties)."""

    def default_log_config(self) -> LogConfig: ...


class TopicConfigStore(ConfigChangeSource, Protocol):
    """Where topic overrides are kept: ``/config/topics/<topic>`` and ``/config/changes``."""

    async def get_all_topics(self) -> list[str]: ...

    async def get_topic_config(self, name: str) -> dict[str, str]:
        """The topic's overrides (empty: none)."""
        ...

    async def set_topic_config(self, name: str, config: Mapping[str, str]) -> None:
        """Write the topic's overrides and a change notification naming it."""


class TopicConfigManager:
    """The topic-config overrides this broker knows, kept current from ZooKeeper.

    Responsibility: load, cache, validate and write topic overrides; follow
    ``/config/changes``; tell listeners about changed effective configs.
    Format: the overrides are the raw strings of ``/config/topics/<topic>``.
    Concurrency: event loop only; one notification task between :meth:`start` and
    :meth:`stop`.
    """

    def __init__(self, zk: TopicConfigStore, config: TopicDefaults) -> None:
        self._zk = zk
        self._config = config
        self._overrides: dict[str, dict[str, str]] = {}
        self._listeners: list[ConfigListener] = []
        self._seen_changes: set[str] = set()
        self._latest_changes: list[str] | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def load_all(self) -> None:
        """Read every topic's overrides (broker start-up, before the logs are opened)."""
        for name in await self._zk.get_all_topics():
            self._overrides[name] = dict(await self._zk.get_topic_config(name))

    def add_listener(self, listener: ConfigListener) -> None:
        """Call ``listener(topic, log_config)`` whenever a topic's overrides change."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Follow ``/config/changes`` until :meth:`stop`."""
        if self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(
            self._follow_changes(), name="topic-config-changes"
        )
        await self._zk.watch_config_changes(self._on_changes)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ queries

    def overrides(self, name: str) -> dict[str, str]:
        """A copy of the topic's overrides (empty when none or unknown)."""
        return dict(self._overrides.get(name, {}))

    def log_config_for(self, name: str, overrides: Mapping[str, str] | None = None) -> LogConfig:
        """The topic's effective log config: broker defaults with ``overrides`` (the stored
        overrides when None) on top; the defaults alone if the overrides are invalid."""
        if overrides is None:
            overrides = self._overrides.get(name, {})
        try:
            return self._config.default_log_config().with_overrides(overrides)
        except ConfigError:
            log.warning("ignoring invalid stored config of topic %s", name)
            return self._config.default_log_config()

    async def ensure_loaded(self, names: Iterable[str]) -> None:
        """Read the overrides of the topics not known yet."""
        for name in names:
            if name not in self._overrides:
                self._overrides[name] = dict(await self._zk.get_topic_config(name))

    # ------------------------------------------------------------------ changes

    async def set_overrides(
        self, name: str, overrides: Mapping[str, str | None], *, validate_only: bool = False
    ) -> None:
        """Replace a topic's overrides (AlterConfigs). Any broker may do this (as ZooKeeper-mode
        Kafka): the znode write publishes a ``/config/changes`` notification every broker
        follows. Raises :class:`InvalidConfigError`."""
        clean = validate_configs(dict(overrides))
        if validate_only:
            return
        await self._zk.set_topic_config(name, clean)
        self._overrides[name] = clean
        self._notify(name)

    def topic_created(self, name: str, overrides: Mapping[str, str]) -> None:
        """Record the overrides a topic was just created with (by this broker's controller)."""
        self._overrides[name] = dict(overrides)

    def topic_deleted(self, name: str) -> None:
        """Forget a deleted topic's overrides."""
        self._overrides.pop(name, None)

    def _on_changes(self, names: list[str]) -> None:
        # the watch callback, on the loop: hand the newest list to the worker
        self._latest_changes = list(names)
        self._wakeup.set()

    async def _follow_changes(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            names, self._latest_changes = self._latest_changes, None
            if names is None:
                continue
            try:
                await self.process_changes(names)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep following: the next notification retries the topic
                log.exception("processing topic config changes failed")

    async def process_changes(self, names: list[str]) -> None:
        """Handle the notifications among ``names`` (the current children of
        ``/config/changes``) not handled before."""
        fresh = [n for n in names if n not in self._seen_changes]
        self._seen_changes = set(names)
        for n in fresh:
            node = await self._zk.get_config_change(n)
            if node is None or not node.entity_path.startswith(TOPIC_ENTITY_PREFIX):
                continue
            topic = node.entity_path.removeprefix(TOPIC_ENTITY_PREFIX)
            self._overrides[topic] = dict(await self._zk.get_topic_config(topic))
            self._notify(topic)

    def _notify(self, topic: str) -> None:
        config = self.log_config_for(topic)
        for listener in list(self._listeners):
            listener(topic, config)
