"""The fault harness's private network: a hub namespace and one namespace per node.

Theory of operation. The harness runner re-executes itself inside a new network namespace
(``unshare --net``, :func:`enter_hub`): the *hub*. Nothing it does to the network is seen
by the host. In the hub it creates one more namespace per node (ZooKeeper, each broker),
each held open by a small holder process, and connects each node to the hub with a veth
pair: the hub side is ``10.99.<i>.1/24``, the node side ``10.99.<i>.2/24`` with a default
route through the hub, which forwards between nodes (``ip_forward``). Every node therefore
has an address of its own and its connections leave from it, like separate hosts; the
clients (the runner's threads) live in the hub and reach every node directly.

A network fault is an iptables rule in the hub: ``FORWARD`` rules drop (or randomly drop,
for a lossy link) the traffic between two nodes in both directions, ``INPUT``/``OUTPUT``
rules cut a node off from the clients. :meth:`Topology.heal` removes every rule. A node's
processes run with ``nsenter --net=/proc/<holder>/ns/net`` (which execs, so the pid is the
process's own and signals reach it).

Requirements: root, ``unshare``, ``nsenter``, ``ip`` (iproute2) and ``iptables`` (installed
by ``make setup`` when missing). :func:`namespaces_available` says whether this machine
allows all of it; the tests skip with its reason where it does not.

Concurrency: one runner thread drives the topology; iptables calls are serialised by a lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

HUB_ENV = "MILLRACE_FAULT_HUB"
SUBNET = "10.99"


class NetworkError(RuntimeError):
    """A namespace, link or rule could not be set up."""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def namespaces_available() -> str | None:
    """None when this machine lets the harness build its network, else the reason."""
    if os.geteuid() != 0:
        return "the fault harness needs root (network namespaces and iptables)"
    for tool in ("unshare", "nsenter", "ip", "iptables"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (make setup installs iptables with apt-get)"
    probe = subprocess.run(
        ["unshare", "--net", "sh", "-c", "ip link set lo up && iptables -L FORWARD -n"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"network namespaces or iptables are not allowed here: {probe.stderr.strip()}"
    return None


def in_hub() -> bool:
    return os.environ.get(HUB_ENV) == "1"


def enter_hub(argv: list[str]) -> None:
    """Re-execute ``python argv`` inside a new network namespace (the hub), unless this
    process already is the hub; never returns when it re-executes."""
    if in_hub():
        return
    env = dict(os.environ, **{HUB_ENV: "1"})
    os.execvpe("unshare", ["unshare", "--net", "--", sys.executable, *argv], env)


@dataclass
class Node:
    """One node's namespace: its index, address, and the holder process keeping it open."""

    name: str
    index: int
    holder: subprocess.Popen[bytes]

    @property
    def ip(self) -> str:
        return f"{SUBNET}.{self.index}.2"

    @property
    def hub_ip(self) -> str:
        return f"{SUBNET}.{self.index}.1"

    def netns_path(self) -> str:
        return f"/proc/{self.holder.pid}/ns/net"

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` run inside this node's namespace (same pid: nsenter execs)."""
        return ["nsenter", f"--net={self.netns_path()}", "--", *cmd]


@dataclass
class Topology:
    """The hub's nodes and the fault rules in force (see the module docstring)."""

    marker: str  # appears in the holders' command lines (for clean-up by the caller)
    nodes: dict[str, Node] = field(default_factory=dict)
    rules: list[tuple[str, list[str]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def create(cls, names: list[str], marker: str) -> Topology:
        if not in_hub():
            raise NetworkError("Topology.create must run inside the hub namespace (enter_hub)")
        _run("ip", "link", "set", "lo", "up")
        _run("sysctl", "-qw", "net.ipv4.ip_forward=1")
        topo = cls(marker)
        try:
            for i, name in enumerate(names, start=1):
                topo._add(name, i)
        except BaseException:
            topo.close()
            raise
        return topo

    def _add(self, name: str, index: int) -> None:
        holder = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--",
                sys.executable,
                "-c",
                "import signal; signal.pause()",
                f"netns-holder:{self.marker}:{name}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        node = Node(name, index, holder)
        self.nodes[name] = node
        deadline = time.monotonic() + 10
        own = os.readlink("/proc/self/ns/net")
        while True:  # until the holder has moved into its own namespace
            try:
                if os.readlink(node.netns_path()) != own:
                    break
            except OSError:
                pass
            if holder.poll() is not None or time.monotonic() > deadline:
                raise NetworkError(f"the namespace holder for {name} did not start")
            time.sleep(0.01)
        hub_if, node_if = f"vh{index}", f"vn{index}"
        _run("ip", "link", "add", hub_if, "type", "veth", "peer", "name", node_if)
        _run("ip", "link", "set", node_if, "netns", str(holder.pid))
        _run("ip", "addr", "add", f"{node.hub_ip}/24", "dev", hub_if)
        _run("ip", "link", "set", hub_if, "up")
        inside = ["nsenter", f"--net={node.netns_path()}", "--"]
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{node.ip}/24", "dev", node_if)
        _run(*inside, "ip", "link", "set", node_if, "up")
        _run(*inside, "ip", "route", "add", "default", "via", node.hub_ip)

    # -- faults --

    def _rule(self, chain: str, spec: list[str]) -> None:
        with self._lock:
            _run("iptables", "-I", chain, *spec)
            self.rules.append((chain, spec))

    def cut(self, a: str, b: str) -> None:
        """Drop everything between nodes ``a`` and ``b``, both directions."""
        ia, ib = self.nodes[a].ip, self.nodes[b].ip
        self._rule("FORWARD", ["-s", ia, "-d", ib, "-j", "DROP"])
        self._rule("FORWARD", ["-s", ib, "-d", ia, "-j", "DROP"])

    def reject(self, a: str, b: str) -> None:
        """Reset every TCP segment between nodes ``a`` and ``b``, both directions: a firewall
        that rejects, so new connections are refused as if nothing listened (what the
        controller's process watch would take for a dead process, docs/failover.md)."""
        ia, ib = self.nodes[a].ip, self.nodes[b].ip
        for src, dst in ((ia, ib), (ib, ia)):
            spec = ["-s", src, "-d", dst, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"]
            self._rule("FORWARD", spec)

    def lossy(self, a: str, b: str, probability: float) -> None:
        """Drop a random ``probability`` of the packets between ``a`` and ``b`` (TCP
        retransmits: a slow, flaky link; ``tc netem`` is not available here)."""
        ia, ib = self.nodes[a].ip, self.nodes[b].ip
        stat = ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.3f}"]
        self._rule("FORWARD", ["-s", ia, "-d", ib, *stat, "-j", "DROP"])
        self._rule("FORWARD", ["-s", ib, "-d", ia, *stat, "-j", "DROP"])

    def cut_from_clients(self, a: str) -> None:
        """Drop everything between node ``a`` and the hub's own processes (the clients)."""
        ia = self.nodes[a].ip
        self._rule("OUTPUT", ["-d", ia, "-j", "DROP"])
        self._rule("INPUT", ["-s", ia, "-j", "DROP"])

    def heal(self) -> None:
        """Remove every fault rule."""
        with self._lock:
            for chain, spec in reversed(self.rules):
                _run("iptables", "-D", chain, *spec, check=False)
            self.rules.clear()

    def close(self) -> None:
        self.heal()
        for node in self.nodes.values():
            if node.holder.poll() is None:
                node.holder.kill()
                node.holder.wait()
