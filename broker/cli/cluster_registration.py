"""Broker registration in a ``millrace cluster``'s ZooKeeper: waiting until brokers have
registered (and a controller is elected), or until a dead broker's registration expired.

"Registered" means a ``/brokers/ids/<id>`` znode created after the broker was started: the
broker epoch (the znode's czxid) is compared with the one seen before the start, so a stale
znode of a hard-killed predecessor (alive until its session times out) is not mistaken for
the new broker.

Each call opens its own ZooKeeper session (``ZkClient``) in a private event loop
(``asyncio.run``) and closes it before returning; the command's thread blocks meanwhile.
Failures raise ``ClusterError`` with the tail of the failing broker's output.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from broker.cli.cluster_process import ClusterError, pid_alive, say, tail


async def _zk_snapshot(zk_connect: str, broker_ids: Sequence[int]) -> dict[str, Any]:
    """Registration epochs of ``broker_ids``, the controller and the cluster id."""
    from broker.zk.client import ZkClient

    client = ZkClient(zk_connect, session_timeout_ms=10_000, connection_timeout_ms=5_000)
    await client.start()
    try:
        epochs = {b: await client.get_broker_epoch(b) for b in broker_ids}
        controller = await client.get_controller()
        cluster_id = await client.get_cluster_id()
        return {"epochs": epochs, "controller": controller, "cluster_id": cluster_id}
    finally:
        await client.close()


def zk_snapshot(zk_connect: str, broker_ids: Sequence[int]) -> dict[str, Any]:
    """``{"epochs": {id: broker epoch or None}, "controller": id or None, "cluster_id": ...}``
    read in one short ZooKeeper session."""
    return asyncio.run(_zk_snapshot(zk_connect, broker_ids))


def wait_unregistered(
    zk_connect: str, broker_ids: Sequence[int], timeout: float, progress: IO[str] | None
) -> None:
    """Wait until no ``/brokers/ids/<id>`` of ``broker_ids`` exists: a hard-killed broker's
    ephemeral znode lives until its session times out, and a new broker with that id
    cannot register before."""
    deadline = time.monotonic() + timeout
    announced: list[int] = []
    while True:
        left = [b for b, e in zk_snapshot(zk_connect, broker_ids)["epochs"].items() if e]
        if not left:
            return
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"broker(s) {left} are still registered in ZooKeeper after {timeout:g}s; "
                "is another broker with that id running?"
            )
        if left != announced:
            announced = left
            say(
                progress,
                f"waiting for the stale registration of broker(s) {left} to expire (a killed "
                "broker's ZooKeeper session times out after zookeeper.session.timeout.ms)",
            )
        time.sleep(0.5)


def wait_registered(
    zk_connect: str,
    procs: Mapping[int, subprocess.Popen[bytes] | int],
    stale: Mapping[int, int | None],
    out_files: Mapping[int, Path],
    timeout: float,
    progress: IO[str] | None,
    need_controller: bool = True,
) -> dict[str, Any]:
    """Until every broker in ``procs`` has a fresh registration (and a controller exists)."""
    from broker.zk.client import ZkClient

    async def run() -> dict[str, Any]:
        client = ZkClient(zk_connect, session_timeout_ms=10_000, connection_timeout_ms=10_000)
        await client.start()
        try:
            deadline = time.monotonic() + timeout
            last_count = -1
            while True:
                for broker_id, proc in procs.items():
                    pid = proc.pid if isinstance(proc, subprocess.Popen) else proc
                    if not pid_alive(pid):
                        code = proc.poll() if isinstance(proc, subprocess.Popen) else None
                        raise ClusterError(
                            f"broker {broker_id} (pid {pid}) exited"
                            f"{f' with code {code}' if code is not None else ''} before "
                            f"registering in ZooKeeper. Last lines of {out_files[broker_id]}:\n"
                            f"{tail(out_files[broker_id])}"
                        )
                fresh = []
                for broker_id in procs:
                    epoch = await client.get_broker_epoch(broker_id)
                    if epoch is not None and epoch != stale.get(broker_id):
                        fresh.append(broker_id)
                controller = await client.get_controller()
                if len(fresh) != last_count:
                    last_count = len(fresh)
                    say(progress, f"{len(fresh)}/{len(procs)} broker(s) registered")
                controller_ok = not need_controller or (
                    controller is not None and (controller in fresh or controller not in procs)
                )
                if len(fresh) == len(procs) and controller_ok:
                    return {"controller": controller}
                if time.monotonic() >= deadline:
                    missing = sorted(set(procs) - set(fresh))
                    tails = "\n".join(
                        f"--- broker {b}: last lines of {out_files[b]} ---\n{tail(out_files[b])}"
                        for b in (missing or list(procs))
                    )
                    what = (
                        f"broker(s) {missing} did not register"
                        if missing
                        else "no controller was elected"
                    )
                    raise ClusterError(f"{what} within {timeout:g}s.\n{tails}")
                await asyncio.sleep(0.2)
        finally:
            await client.close()

    return asyncio.run(run())
