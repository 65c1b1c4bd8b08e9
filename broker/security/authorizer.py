"""Kafka's ZooKeeper ACL authorizer (``kafka.security.authorizer.AclAuthorizer``): a cache of
every ACL in ZooKeeper, kept current through the change notifications, and the decision
for (principal, host, operation, resource).

Decision, as Kafka's:

1. A principal in ``super.users`` is allowed everything.
2. The ACLs that apply to a resource are those of its LITERAL name, the LITERAL wildcard
   ``*`` of its type, and every PREFIXED pattern its name starts with.
3. No ACL applies: allowed if ``allow.everyone.if.no.acl.found`` (default false), else
   denied.
4. A DENY entry matching the principal (or ``User:*``), the host (or ``*``) and the
   operation (or ALL) denies.
5. Otherwise an ALLOW entry matching principal, host and an operation that implies the one
   asked allows: DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by
   ALTER_CONFIGS; everything by ALL. Nothing matching: denied.

ZooKeeper is reached through :class:`AclStore`, the operations the authorizer needs (the
ZooKeeper client, ``broker.zk.client.ZkClient``, has them), so this floor imports nothing
of ``broker.zk``.

Concurrency: the cache is read and replaced on the broker's event loop; the ZooKeeper
watches hop back to the loop (``ZkSession``), and the notifications are handled by one task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from broker.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclUpdate,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

log = logging.getLogger(__name__)

KAFKA_AUTHORIZER_CLASSES = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "broker.security.authorizer.AclAuthorizer",
    }
)

_IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


class AclStore(Protocol):
    """The ZooKeeper ACL store's operations the authorizer uses."""

    async def ensure_acl_paths(self) -> None: ...

    async def all_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]: ...

    async def get_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]: ...

    async def update_acls(
        self, pattern: ResourcePattern, update: AclUpdate
    ) -> frozenset[AccessControlEntry]:
        """Apply ``update`` to the pattern's stored entries and announce the change; the new
        entries."""
        ...

    async def watch_acl_changes(self, callback: Callable[[str, list[str]], None]) -> object:
        """Call ``callback(directory, notification names)`` on every change of either change
        directory (the watches it returns are not used)."""
        ...

    async def get_acl_change(self, directory: str, name: str) -> ResourcePattern | None:
        """The pattern a change notification names (None: gone or unreadable)."""
        ...


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


class AclAuthorizer:
    """The ACL cache and decisions (see the module docstring)."""

    def __init__(
        self,
        zk: AclStore,
        *,
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
    ) -> None:
        self._zk = zk
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._seen: dict[str, set[str]] = {}
        self._wake = asyncio.Event()
        self._pending: dict[str, list[str]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Load every ACL, then follow the change notifications until :meth:`stop`."""
        await self._zk.ensure_acl_paths()
        self._acls = await self._zk.all_acls()
        self._task = asyncio.create_task(self._follow(), name="acl-changes")
        await self._zk.watch_acl_changes(self._on_changes)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ decisions

    def authorize(
        self, principal: str, host: str, operation: Operation, rtype: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching_entries(rtype, name)
        if not entries:
            return self.allow_if_no_acl
        host = _host_only(host)
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        for e in entries:
            if (
                e.permission == Permission.DENY
                and e.principal in principals
                and e.host in hosts
                and e.operation in (operation, Operation.ALL)
            ):
                return False
        allowed_by = _IMPLIED.get(operation, frozenset({operation}))
        return any(
            e.permission == Permission.ALLOW
            and e.principal in principals
            and e.host in hosts
            and (e.operation in allowed_by or e.operation == Operation.ALL)
            for e in entries
        )

    def authorize_any(
        self, principal: str, host: str, operation: Operation, rtype: ResourceType
    ) -> bool:
        """Whether ``principal`` may ``operation`` on at least one resource of ``rtype``
        (Kafka's ``authorizeByResourceType``, KIP-679: an idempotent producer needs WRITE on
        some topic): an ALLOW that applies, with no DENY of the same pattern or of a wildcard."""
        if principal in self.super_users:
            return True
        host = _host_only(host)
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        allowed_by = _IMPLIED.get(operation, frozenset({operation}))
        denied_everywhere = any(
            p.type == rtype
            and p.pattern == PatternType.LITERAL
            and p.name == WILDCARD
            and any(
                e.permission == Permission.DENY
                and e.principal in principals
                and e.host in hosts
                and e.operation in (operation, Operation.ALL)
                for e in entries
            )
            for p, entries in self._acls.items()
        )
        if denied_everywhere:
            return False
        for pattern, entries in self._acls.items():
            if pattern.type != rtype:
                continue
            denied = any(
                e.permission == Permission.DENY
                and e.principal in principals
                and e.host in hosts
                and e.operation in (operation, Operation.ALL)
                for e in entries
            )
            if not denied and any(
                e.permission == Permission.ALLOW
                and e.principal in principals
                and e.host in hosts
                and (e.operation in allowed_by or e.operation == Operation.ALL)
                for e in entries
            ):
                return True
        return self.allow_if_no_acl and not any(p.type == rtype for p in self._acls)

    def _matching_entries(self, rtype: ResourceType, name: str) -> list[AccessControlEntry]:
        acls = self._acls
        out: list[AccessControlEntry] = []
        for key in (
            ResourcePattern(rtype, name, PatternType.LITERAL),
            ResourcePattern(rtype, WILDCARD, PatternType.LITERAL),
        ):
            found = acls.get(key)
            if found:
                out.extend(found)
        for pattern, entries in acls.items():
            if (
                pattern.pattern == PatternType.PREFIXED
                and pattern.type == rtype
                and name.startswith(pattern.name)
            ):
                out.extend(entries)
        return out

    # ------------------------------------------------------------------ the admin APIs

    def bindings(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [
            AclBinding(pattern, entry)
            for pattern, entries in sorted(
                self._acls.items(), key=lambda kv: (kv[0].type, kv[0].name, kv[0].pattern)
            )
            for entry in sorted(entries, key=lambda e: (e.principal, e.host, e.operation))
            if flt.matches(AclBinding(pattern, entry))
        ]

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            added = frozenset(entries)

            def update(
                cur: frozenset[AccessControlEntry], added: frozenset[AccessControlEntry] = added
            ) -> frozenset[AccessControlEntry]:
                return cur | added

            self._acls[pattern] = await self._zk.update_acls(pattern, update)
        self._drop_empty()

    async def delete(self, flt: AclBindingFilter) -> list[AclBinding]:
        """Delete the bindings ``flt`` matches (reading ZooKeeper's current entries)."""
        deleted: list[AclBinding] = []
        candidates = [p for p in await self._candidates() if flt.matches_pattern(p)]
        for pattern in candidates:
            removed: set[AccessControlEntry] = set()

            def update(
                cur: frozenset[AccessControlEntry],
                removed: set[AccessControlEntry] = removed,
            ) -> frozenset[AccessControlEntry]:
                removed.clear()
                removed.update(e for e in cur if flt.matches_entry(e))
                return cur - removed

            self._acls[pattern] = await self._zk.update_acls(pattern, update)
            deleted.extend(AclBinding(pattern, e) for e in sorted(removed, key=str))
        self._drop_empty()
        return deleted

    async def _candidates(self) -> list[ResourcePattern]:
        return list((await self._zk.all_acls()).keys() | self._acls.keys())

    def _drop_empty(self) -> None:
        for pattern in [p for p, e in self._acls.items() if not e]:
            del self._acls[pattern]

    # ------------------------------------------------------------------ notifications

    def _on_changes(self, directory: str, names: list[str]) -> None:
        self._pending[directory] = names
        self._wake.set()

    async def _follow(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, {}
            for directory, names in pending.items():
                try:
                    await self._process(directory, names)
                except Exception:  # the next notification retries
                    log.exception("processing ACL change notifications failed")
                    self._seen.pop(directory, None)

    async def _process(self, directory: str, names: list[str]) -> None:
        seen = self._seen.get(directory)
        self._seen[directory] = set(names)
        if seen is None:
            # first call: the cache was loaded after these were written; reload it whole
            # in case a change landed between the load and the watch
            self._acls = await self._zk.all_acls()
            return
        for name in names:
            if name in seen:
                continue
            pattern = await self._zk.get_acl_change(directory, name)
            if pattern is None:
                continue
            entries = await self._zk.get_acls(pattern)
            if entries:
                self._acls[pattern] = entries
            else:
                self._acls.pop(pattern, None)


def _host_only(peer: str) -> str:
    """``127.0.0.1:5555`` -> ``127.0.0.1`` (``[::1]:5555`` -> ``::1``)."""
    if peer.startswith("["):
        return peer[1 : peer.find("]")]
    if peer.count(":") == 1:
        return peer.rsplit(":", 1)[0]
    return peer
