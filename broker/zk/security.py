"""ZooKeeper operations of security: ACLs (``/kafka-acl``, ``/kafka-acl-extended``, their
change notifications) and user entity configs (``/config/users/<user>``: SCRAM credentials
and quotas, announced through ``/config/changes``), in Kafka's formats (see
:mod:`broker.security.acl` and :mod:`kafka_security.scram`).

ACL writes are read-modify-write with the znode's version, retried on a conflict, so
brokers handling CreateAcls and DeleteAcls at the same time never lose each other's
entries (Kafka's ``ZkAclStore`` does the same); each write is followed by a sequential change
notification that every broker's authorizer follows.

Concurrency: coroutines that run blocking kazoo calls in worker threads (``ZkSession``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.security.acl import (
    ACL_CHANGES_PATH,
    ACL_PATH,
    CHANGE_PREFIX,
    EXTENDED_ACL_CHANGES_PATH,
    EXTENDED_ACL_PATH,
    STORED_TYPES,
    AccessControlEntry,
    AclUpdate,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
    pattern_of_notice,
)
from broker.zk.interface import WatchHandle
from broker.zk.session import ZkSession
from broker.zk.znodes.common import CONFIG_CHANGES_PATH, CONFIG_PATH

ACL_ROOTS = (ACL_PATH, ACL_CHANGES_PATH, EXTENDED_ACL_PATH, EXTENDED_ACL_CHANGES_PATH)


class ZkSecurityOps(ZkSession):
    """ACL and user-config znodes (mixed into :class:`~broker.zk.client.ZkClient`)."""

    # ------------------------------------------------------------------ ACLs

    async def all_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every stored ACL, by resource pattern."""

        def work() -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
            out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
            for base, pattern_type in (
                (ACL_PATH, PatternType.LITERAL),
                (EXTENDED_ACL_PATH, PatternType.PREFIXED),
            ):
                for rtype in STORED_TYPES:
                    try:
                        names = self._kz.get_children(f"{base}/{rtype.zk_name}")
                    except NoNodeError:
                        continue
                    for name in names:
                        pattern = ResourcePattern(rtype, name, pattern_type)
                        try:
                            data, _ = self._kz.get(pattern.znode())
                        except NoNodeError:
                            continue
                        entries = decode_acls(data)
                        if entries:
                            out[pattern] = entries
            return out

        return await self._run(work)

    async def get_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        def work() -> frozenset[AccessControlEntry]:
            try:
                data, _ = self._kz.get(pattern.znode())
            except NoNodeError:
                return frozenset()
            return decode_acls(data)

        return await self._run(work)

    async def update_acls(
        self, pattern: ResourcePattern, update: AclUpdate
    ) -> frozenset[AccessControlEntry]:
        """Apply ``update`` to the pattern's entries (conditionally on the znode's version,
        retried on a conflict), then announce the change; returns the new entries. A pattern
        left without entries has its znode deleted."""

        def work() -> frozenset[AccessControlEntry]:
            path = pattern.znode()
            while True:
                try:
                    data, stat = self._kz.get(path)
                    current, version = decode_acls(data), stat.version
                except NoNodeError:
                    current, version = frozenset(), -1
                new = update(current)
                if new == current:
                    return current
                try:
                    if version < 0:
                        self._kz.create(path, encode_acls(new), makepath=True)
                    elif new:
                        self._kz.set(path, encode_acls(new), version=version)
                    else:
                        self._kz.delete(path, version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                directory, notice = pattern.change_notice()
                self._kz.create(
                    f"{directory}/{CHANGE_PREFIX}", notice, sequence=True, makepath=True
                )
                return new

        return await self._run(work)

    async def watch_acl_changes(
        self, callback: Callable[[str, list[str]], None]
    ) -> list[WatchHandle]:
        """Call ``callback(directory, sorted notification names)`` whenever either change
        directory's children change."""
        handles = []
        for directory in (ACL_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH):
            handles.append(
                await self.watch_children(directory, functools.partial(callback, directory))
            )
        return handles

    async def get_acl_change(self, directory: str, name: str) -> ResourcePattern | None:
        """The pattern a change notification names, or None (purged, or unreadable)."""

        def work() -> ResourcePattern | None:
            try:
                data, _ = self._kz.get(f"{directory}/{name}")
                return pattern_of_notice(directory, data)
            except (NoNodeError, ValueError, KeyError):
                return None

        return await self._run(work)

    async def ensure_acl_paths(self) -> None:
        def work() -> None:
            for root in ACL_ROOTS:
                self._kz.ensure_path(root)
            for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER):
                self._kz.ensure_path(f"{ACL_PATH}/{rtype.zk_name}")

        await self._run(work)

    # ------------------------------------------------------------------ entity configs

    async def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        """``/config/<entity_type>/<name>``'s config (``users``, ``clients``; empty if none)."""

        def work() -> dict[str, str]:
            try:
                data, _ = self._kz.get(f"{CONFIG_PATH}/{entity_type}/{name}")
            except NoNodeError:
                return {}
            if not data:
                return {}
            obj = json.loads(data.decode())
            return {str(k): str(v) for k, v in (obj.get("config") or {}).items()}

        return await self._run(work)

    async def list_entities(self, entity_type: str) -> list[str]:
        def work() -> list[str]:
            try:
                return sorted(self._kz.get_children(f"{CONFIG_PATH}/{entity_type}"))
            except NoNodeError:
                return []

        return await self._run(work)

    async def update_entity_config(
        self,
        entity_type: str,
        name: str,
        update: Callable[[dict[str, str]], dict[str, str]],
    ) -> dict[str, str]:
        """Read-modify-write ``/config/<entity_type>/<name>`` (conditional on its version),
        then publish a ``/config/changes`` notification naming ``<entity_type>/<name>``, as
        Kafka's ``AdminZkClient.changeConfigs`` does."""
        path = f"{CONFIG_PATH}/{entity_type}/{name}"

        def work() -> dict[str, str]:
            while True:
                try:
                    data, stat = self._kz.get(path)
                    obj = json.loads(data.decode()) if data else {}
                    current = {str(k): str(v) for k, v in (obj.get("config") or {}).items()}
                    version = stat.version
                except NoNodeError:
                    current, version = {}, -1
                new = update(dict(current))
                encoded = json.dumps({"version": 1, "config": new}).encode()
                try:
                    if version < 0:
                        self._kz.create(path, encoded, makepath=True)
                    else:
                        self._kz.set(path, encoded, version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                notice = json.dumps({"version": 2, "entity_path": f"{entity_type}/{name}"})
                self._kz.create(
                    f"{CONFIG_CHANGES_PATH}/config_change_",
                    notice.encode(),
                    sequence=True,
                    makepath=True,
                )
                return new

        return await self._run(work)
