"""One fault-harness run: a 3-broker cluster in its own network, the four workloads, a
seeded schedule of faults, then the checks; the report is a JSON file.

Usage (as root; the run re-executes itself inside a new network namespace)::

    python -m tests.fault.runner --dir D --seed S --faults N [--kinds k1,k2] [--cycle] \
        [--workloads producers,views,group,transactions] --report D/report.json

Steps: build the topology (``tests/fault/netns.py``) and start ZooKeeper and the brokers
(``tests/fault/cluster.py``); create the workloads' topics (6 partitions, RF 3, min ISR 2);
start the workloads (``tests/fault/workloads.py``) and let them warm up; inject ``N``
faults chosen from ``S`` (``tests/fault/faults.py``); heal everything, wait for every
partition's ISR to be whole again; stop the workloads, letting in-flight requests finish;
read every topic back and run the checkers (``tests/fault/checks.py``). The report holds
the seed (a failure replays with the same ``--seed``), each fault, each workload's counts,
broker crashes, and the anomalies (counts that must be 0). Exit status 0 when there is no
anomaly, 1 otherwise.

Processes: every process started runs in the run's namespaces and is SIGKILLed by pid at
the end, whatever happened. Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tests.fault import checks, netns
from tests.fault.faults import KINDS as KINDS_ALL
from tests.fault.workloads import CLIENT_SETTINGS

WORKLOADS = ("producers", "views", "group", "transactions")
TOPICS = {"producers": "w1", "group": "w2", "transactions": "w3-in", "copies": "w3-out"}
PARTITIONS = 6


SMALL_DISK_BYTES = 64 << 20


def mount_tmpfs(path: Path, size: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        check=True,
        capture_output=True,
        timeout=60,
    )


def unmount(path: Path) -> None:
    """Unmount (lazily if something still holds a file there)."""
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def progress(text: str) -> None:
    print(f"[fault {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _full_isr(bootstrap: str, topics: list[str], timeout_s: float) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_SETTINGS})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=10)
            if all(
                t in md.topics
                and all(
                    len(p.isrs) == len(p.replicas) and p.leader >= 0
                    for p in md.topics[t].partitions.values()
                )
                for t in topics
            ):
                return True
        except Exception:  # noqa: BLE001 - not answering yet
            pass
        time.sleep(1)
    return False


def _batch_origins(cluster: Any, topic: str) -> dict[tuple[int, int], tuple[int, int]]:
    """(partition, offset) -> (producer id, producer epoch) of the batch holding it, read
    from the segment files of the first broker holding each partition (every ISR is whole
    when this runs, and the workloads have stopped writing)."""
    from broker.protocol.records import iter_batches

    out: dict[tuple[int, int], tuple[int, int]] = {}
    done: set[int] = set()
    for broker_id in cluster.broker_ids:
        for log_dir in cluster.log_dirs(broker_id):
            for pdir in sorted(log_dir.glob(f"{topic}-*")):
                suffix = pdir.name[len(topic) + 1 :]
                if not suffix.isdigit() or int(suffix) in done:
                    continue
                partition = int(suffix)
                done.add(partition)
                for segment in sorted(pdir.glob("*.log")):
                    for h in iter_batches(segment.read_bytes(), allow_partial_tail=True):
                        origin = (h.producer_id, h.producer_epoch)
                        for offset in range(h.base_offset, h.last_offset + 1):
                            out[(partition, offset)] = origin
    return out


def _client_errors(workload: Any) -> list[str]:
    """What ended a workload's threads (its own and its feeder's)."""
    feeder = getattr(workload, "feeder", None)
    threads = [workload.t] + ([feeder.t] if feeder is not None else [])
    return [m for t in threads for m in (*t.errors, *t.hangs)]


def _save_history(directory: Path, running: dict[str, Any], final: list[Any]) -> None:
    """What the clients saw, for a post-mortem: acknowledgements (with the time each was
    recorded), each consumer's reads, and the final read of the producers' topic."""
    directory.mkdir(parents=True, exist_ok=True)
    if "producers" in running:
        acks = running["producers"].acks
        (directory / "acks.json").write_text(json.dumps([list(a) for a in acks]))
        (directory / "final.json").write_text(json.dumps([list(r) for r in final]))
    if "views" in running:
        views = {k: [list(r) for r in v] for k, v in running["views"].views.items()}
        (directory / "views.json").write_text(json.dumps(views))


def _start_workloads(bootstrap: str, chosen: list[str], seed: int, running: dict[str, Any]) -> None:
    """Create the chosen workloads' topics and start the workloads, each entered in
    ``running`` by name as soon as it exists (the caller stops whatever is there)."""
    from tests.fault import workloads

    for name in ("producers", "group", "transactions", "copies"):
        wanted = name if name != "copies" else "transactions"
        if wanted in chosen or (name == "producers" and "views" in chosen):
            workloads.create_topic(bootstrap, TOPICS[name], PARTITIONS)
    if "producers" in chosen or "views" in chosen:
        running["producers"] = workloads.Producers(bootstrap, TOPICS["producers"])
    if "views" in chosen:
        running["views"] = workloads.ConsumerViews(bootstrap, TOPICS["producers"])
    if "group" in chosen:
        running["group"] = workloads.Group(bootstrap, TOPICS["group"])
    if "transactions" in chosen:
        running["transactions"] = workloads.Transactions(
            bootstrap, TOPICS["transactions"], TOPICS["copies"], seed=seed
        )
    for w in running.values():
        w.start()


def _inject_faults(scheduler: Any, args: argparse.Namespace) -> None:
    """``args.faults`` faults, of the kinds in turn (``--cycle``) or at random."""
    for number in range(1, args.faults + 1):
        if args.cycle:
            kind = scheduler.kinds[(number - 1) % len(scheduler.kinds)]
        else:
            kind = scheduler.rng.choice(scheduler.kinds)
        event = scheduler.inject(number, kind)
        progress(
            f"fault {number}/{args.faults}: {event.kind} {event.target}"
            f"{' (' + event.note + ')' if event.note else ''}, held {event.held_s}s, "
            f"recovered in {event.recovered_s}s"
        )


def _check_workloads(
    cluster: Any, bootstrap: str, running: dict[str, Any], chosen: list[str]
) -> tuple[dict[str, dict[str, int]], list[Any]]:
    """Read the producers' topic back and run every workload's checker; returns the counts
    by workload and the final read."""
    from tests.fault import workloads

    final_w1 = workloads.read_all(bootstrap, TOPICS["producers"]) if "producers" in running else []
    results: dict[str, dict[str, int]] = {}
    if "producers" in running and "producers" in chosen:
        origins = _batch_origins(cluster, TOPICS["producers"])
        results["producers"] = running["producers"].check(final_w1, origins)
    if "views" in running:
        results["views"] = running["views"].check(final_w1)
    if "group" in running:
        results["group"] = running["group"].check()
    if "transactions" in running:
        results["transactions"] = running["transactions"].check()
    return results, final_w1


def _report_results(
    report: dict[str, Any],
    scheduler: Any,
    running: dict[str, Any],
    results: dict[str, dict[str, int]],
) -> None:
    """The faults, the crashes, the client errors and the anomalies the checkers' counts
    show into ``report``."""
    from tests.fault import faults

    report["faults"] = faults.summary(scheduler.events)
    report["faults_injected"] = len(scheduler.events)
    report["broker_crashes"] = scheduler.crashes
    report["client_error_messages"] = {
        name: errors for name, w in running.items() if (errors := _client_errors(w))
    }
    report["anomalies"] = {
        name: found for name, counts in results.items() if (found := checks.anomalies(counts))
    }
    if scheduler.crashes:
        report["anomalies"]["cluster"] = {"broker_crashes": len(scheduler.crashes)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fault import faults
    from tests.fault.cluster import FaultCluster

    run_dir = Path(args.dir).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report: dict[str, Any] = {
        "seed": args.seed,
        "faults_requested": args.faults,
        "kinds": list(args.kinds),
        "workloads": {},
        "anomalies": {},
    }
    topo = netns.Topology.create(["zk", "b1", "b2", "b3"], marker=str(run_dir))
    small: Path | None = None
    if "disk-full" in args.kinds:  # broker 3 gets a second, small log directory
        small = run_dir / "broker-3" / "small-disk"
        mount_tmpfs(small, SMALL_DISK_BYTES)
    cluster = FaultCluster(
        topo, run_dir, 3, log_dirs={3: [small]} if small else None, security=args.security
    )
    chosen = args.workloads
    running: dict[str, Any] = {}
    try:
        progress(f"starting ZooKeeper and 3 brokers in {run_dir}")
        cluster.start()
        CLIENT_SETTINGS.update(cluster.client_settings)  # a secured run: every client as admin
        bootstrap = cluster.bootstrap
        _start_workloads(bootstrap, chosen, args.seed, running)
        progress(f"workloads {sorted(running)} running; warming up")
        time.sleep(args.warmup)  # the workloads run fault-free for --warmup seconds
        scheduler = faults.Scheduler(
            cluster,
            args.seed,
            kinds=tuple(args.kinds),
            corrupt_topics=tuple(TOPICS[n] for n in ("producers", "group", "transactions")),
        )
        _inject_faults(scheduler, args)
        progress("healing; waiting for every ISR to be whole")
        scheduler.recover()
        topics = [
            t
            for n, t in TOPICS.items()
            if n in running or (n == "copies" and "transactions" in running)
        ]
        report["isr_whole_at_end"] = _full_isr(bootstrap, topics, 180)
        time.sleep(args.settle)  # the workloads run on the healed cluster for --settle seconds
        progress("stopping the workloads")
        for w in running.values():
            w.stop()
        progress("reading back and checking")
        results, final_w1 = _check_workloads(cluster, bootstrap, running, chosen)
        report["workloads"] = results
        _save_history(run_dir / "history", running, final_w1)
        _report_results(report, scheduler, running, results)
    except Exception:  # noqa: BLE001 - reported with the run's traceback, never hidden
        report["error"] = traceback.format_exc()
        progress(f"run failed:\n{report['error']}")
    finally:
        for w in running.values():
            w.t.stopping.set()
        cluster.close()
        topo.close()
        if small is not None:
            unmount(small)
        report["seconds"] = round(time.monotonic() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--kinds", default=",".join(KINDS_ALL))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument(
        "--cycle", action="store_true", help="take the kinds in turn instead of at random"
    )
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--report", required=True)
    ap.add_argument(
        "--security",
        choices=("ssl", "sasl_plaintext", "sasl_ssl"),
        default=None,
        help="secure the cluster as `millrace cluster up --security` does",
    )
    args = ap.parse_args(argv)
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.workloads = [w for w in args.workloads.split(",") if w]
    bad = [k for k in args.kinds if k not in KINDS_ALL] + [
        w for w in args.workloads if w not in WORKLOADS
    ]
    if bad:
        ap.error(f"unknown fault kind or workload: {', '.join(bad)}")
    reason = netns.namespaces_available() if not netns.in_hub() else None
    if reason:
        print(f"fault harness unavailable: {reason}", file=sys.stderr)
        return 2
    netns.enter_hub(["-m", "tests.fault.runner", *argv])
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    progress(f"seed {args.seed}: {args.faults} faults of {args.kinds}")
    report = run(args)
    Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    progress(f"report: {args.report}; anomalies: {report['anomalies'] or 'none'}")
    return 0 if not report["anomalies"] and "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
