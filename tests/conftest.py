"""Fixtures shared by every test tier. Keep this file small; tier-specific fixtures live in the
tier's own conftest.py.

* ``zookeeper`` (session-scoped): the connect string (``127.0.0.1:PORT``) of one embedded
  ZooKeeper started from pyspark's jars (tickTime 500 ms, so sessions may be as short as
  1 s); stopped by its pid at teardown, even when tests fail. Tests that need isolation use a
  chroot of their own: ``f"{zookeeper}/{unique_name}"`` (ZkClient creates it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.ports import free_port


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Connect string of a session-wide embedded ZooKeeper."""
    from broker.zk.embedded_server import EmbeddedZooKeeper

    zk = EmbeddedZooKeeper(free_port(), tmp_path_factory.mktemp("zookeeper"), tick_time=500)
    try:
        zk.start(timeout=60)
        yield zk.connect_string
    finally:
        zk.stop()
