"""Embedded ZooKeeper, started from the jars inside the ``pyspark`` wheel (DESIGN.md section 1.5).

Theory of operation: the ``pyspark`` wheel ships ``pyspark/jars/zookeeper-<v>.jar`` and the
libraries it needs, so ``pip install`` plus the machine's Java (11+) is enough to run a
standalone ZooKeeper. :func:`zookeeper_classpath` picks the minimal set of jars that
``org.apache.zookeeper.server.ZooKeeperServerMain`` needs at run time (found by trial on
ZooKeeper 3.9):

* ``zookeeper`` and ``zookeeper-jute`` (the server and its wire records);
* ``slf4j-api`` plus a logging binding: ``log4j-slf4j2-impl`` + ``log4j-api`` + ``log4j-core``
  (configured by a generated ``log4j2.properties``), or ``slf4j-simple``/``slf4j-nop``;
* ``metrics-core`` (Dropwizard; the default metrics provider's summaries need it);
* ``snappy-java`` (``persistence.Util`` references it while writing the first snapshot; without
  it the server binds its port, answers ``ruok`` but never serves requests).

Netty is not needed: the default ``NIOServerCnxnFactory`` is used, and ``audience-annotations``
is only a compile-time annotation.

:class:`EmbeddedZooKeeper` writes ``zoo.cfg`` and ``log4j2.properties`` into its data
directory, starts ``java ... ZooKeeperServerMain zoo.cfg`` in its own session (so a Ctrl-C
aimed at the parent does not reach it), and declares it ready only when it answers the
four-letter words ``ruok`` with ``imok`` *and* ``srvr`` with a ``Mode:`` line (``ruok`` alone
also answers when the server failed to load its database).

An *ensemble member* (``server_id`` and ``servers`` given) runs ``QuorumPeerMain`` instead of
``ZooKeeperServerMain``: its ``zoo.cfg`` lists every member as
``server.N=host:peerPort:electionPort`` (:func:`zoo_cfg`), its data directory holds a ``myid``
file with its own id, and it serves (``srvr`` answers ``Mode: leader`` or ``Mode: follower``)
only while a majority of the members (:func:`quorum_size`) runs and has elected a leader. A
member without a quorum answers ``ruok`` but not ``srvr``'s ``Mode:``; :func:`zookeeper_mode`
tells the cases apart and :func:`ensemble_serving` is the readiness of a whole ensemble.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
ENSEMBLE_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# cons: the connections of a node with their session ids (which node a broker's session uses)
FOUR_LETTER_WORDS = "ruok,srvr,stat,cons"
# initLimit / syncLimit in ticks (ZooKeeper's sample zoo.cfg values)
DEFAULT_INIT_LIMIT = 10
DEFAULT_SYNC_LIMIT = 5
# srvr's Mode: values of a node that serves requests
SERVING_MODES = frozenset({"leader", "follower", "standalone", "observer"})
DEFAULT_JVM_OPTIONS: tuple[str, ...] = ("-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")

# (name, regex on the file name). All of these are required.
_REQUIRED_JARS: tuple[tuple[str, str], ...] = (
    ("zookeeper", r"zookeeper-\d[\w.\-]*\.jar"),
    ("zookeeper-jute", r"zookeeper-jute-\d[\w.\-]*\.jar"),
    ("slf4j-api", r"slf4j-api-\d[\w.\-]*\.jar"),
    ("metrics-core", r"metrics-core-\d[\w.\-]*\.jar"),
    ("snappy-java", r"snappy-java-\d[\w.\-]*\.jar"),
)
# Logging bindings, in order of preference; the first complete group wins.
_LOG4J_GROUP: tuple[tuple[str, str], ...] = (
    ("log4j-slf4j2-impl", r"log4j-slf4j2-impl-\d[\w.\-]*\.jar"),
    ("log4j-api", r"log4j-api-\d[\w.\-]*\.jar"),
    ("log4j-core", r"log4j-core-\d[\w.\-]*\.jar"),
)
_FALLBACK_BINDINGS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("slf4j-simple", r"slf4j-simple-\d[\w.\-]*\.jar"),),
    (("slf4j-nop", r"slf4j-nop-\d[\w.\-]*\.jar"),),
)


class ZooKeeperError(RuntimeError):
    """Base class of the embedded-ZooKeeper errors."""


class JavaNotFoundError(ZooKeeperError):
    """No ``java`` executable: neither ``$JAVA_HOME/bin/java`` nor ``java`` on ``PATH``."""


class ZooKeeperJarsNotFoundError(ZooKeeperError):
    """The pyspark wheel (or the given directory) lacks a jar ZooKeeper needs."""


class ZooKeeperStartError(ZooKeeperError):
    """The ZooKeeper process died, or did not answer in time; the message has the log tail."""


class ZooKeeperConfigError(ZooKeeperError, ValueError):
    """An ensemble's settings do not fit together (ids, ``server.N`` lines, ports)."""


@dataclass(frozen=True)
class QuorumServer:
    """One ``server.N=host:peerPort:electionPort`` line of an ensemble's ``zoo.cfg``: the id
    of the member (its ``myid``), the address its peers reach it at, the port followers
    connect to the leader on (``peer_port``) and the leader-election port."""

    id: int
    host: str
    peer_port: int
    election_port: int

    def line(self) -> str:
        return f"server.{self.id}={self.host}:{self.peer_port}:{self.election_port}"

    def spec(self) -> str:
        """``N=host:peer:election``, what :func:`parse_server` reads back."""
        return f"{self.id}={self.host}:{self.peer_port}:{self.election_port}"


def _port(text: str, what: str, source: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ZooKeeperConfigError(f"{source}: {what} {text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ZooKeeperConfigError(f"{source}: {what} {port} is not a port (1-65535)")
    return port


def parse_server(spec: str, server_id: int | None = None) -> QuorumServer:
    """A member from ``N=host:peer:election`` (``--server``), or from the value of a
    ``server.N`` line (``host:peer:election``, optionally with ZooKeeper's ``:participant``
    role and ``;clientPort`` suffix) when ``server_id`` is given.

    Raises :class:`ZooKeeperConfigError` naming the spec.
    """
    text = spec.strip()
    if server_id is None:
        source = f"--server {spec!r}"
        head, sep, text = text.partition("=")
        if not sep:
            raise ZooKeeperConfigError(f"{source}: expected ID=HOST:PEER_PORT:ELECTION_PORT")
        try:
            server_id = int(head.strip())
        except ValueError:
            raise ZooKeeperConfigError(
                f"{source}: the id {head.strip()!r} is not a number"
            ) from None
    else:
        source = f"server.{server_id}={spec}"
    text = text.partition(";")[0].strip()
    parts = text.split(":")
    if len(parts) == 4 and parts[3] in ("participant", "observer"):
        if parts[3] == "observer":
            raise ZooKeeperConfigError(f"{source}: observers are not supported")
        parts = parts[:3]
    if len(parts) != 3 or not parts[0]:
        raise ZooKeeperConfigError(f"{source}: expected ID=HOST:PEER_PORT:ELECTION_PORT")
    if not 1 <= server_id <= 255:
        raise ZooKeeperConfigError(f"{source}: the id must be between 1 and 255")
    return QuorumServer(
        server_id,
        parts[0],
        _port(parts[1], "peer port", source),
        _port(parts[2], "election port", source),
    )


def check_ensemble(server_id: int | None, servers: Sequence[QuorumServer]) -> None:
    """Raise :class:`ZooKeeperConfigError` unless ``server_id`` is one of ``servers``, whose
    ids are distinct (and neither or both are given)."""
    if not servers:
        if server_id is not None:
            raise ZooKeeperConfigError(
                f"server id {server_id} given but no ensemble: list every member "
                "(server.N lines / --server N=HOST:PEER_PORT:ELECTION_PORT)"
            )
        return
    ids = [s.id for s in servers]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ZooKeeperConfigError(f"server id(s) {dupes} listed more than once in the ensemble")
    if server_id is None:
        raise ZooKeeperConfigError(
            "an ensemble member needs its own id: --id N, or a myid file in the data directory"
        )
    if server_id not in ids:
        raise ZooKeeperConfigError(
            f"server id {server_id} is not one of the ensemble's server ids {sorted(ids)}"
        )


def quorum_size(members: int) -> int:
    """How many members of an ensemble of ``members`` must run for it to serve (a majority)."""
    return members // 2 + 1


def zoo_cfg(
    *,
    data_dir: Path,
    port: int,
    host: str = "127.0.0.1",
    tick_time: int = 2000,
    max_client_cnxns: int = 0,
    servers: Sequence[QuorumServer] = (),
    init_limit: int = DEFAULT_INIT_LIMIT,
    sync_limit: int = DEFAULT_SYNC_LIMIT,
) -> str:
    """The text of ``zoo.cfg``: a standalone server, or (with ``servers``) an ensemble member
    (``initLimit``, ``syncLimit`` and one ``server.N`` line per member; the member's own id
    goes into the ``myid`` file, not here)."""
    lines = [
        "# Written by millrace (broker/zk/embedded_server.py); rewritten at every start.",
        f"tickTime={tick_time}",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        f"clientPortAddress={host}",
        f"maxClientCnxns={max_client_cnxns}",
        "admin.enableServer=false",
        f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
    ]
    if servers:
        lines += [
            f"initLimit={init_limit}",
            f"syncLimit={sync_limit}",
            # static membership: ZooKeeper keeps the server.N lines in this file
            "reconfigEnabled=false",
            *(s.line() for s in sorted(servers, key=lambda s: s.id)),
        ]
    return "\n".join(lines) + "\n"


def find_java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java`` if it exists, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        log.warning("JAVA_HOME=%s has no bin/java; looking for java on PATH", java_home)
    found = shutil.which("java")
    if found:
        return found
    raise JavaNotFoundError(
        "ZooKeeper needs Java 11+; install a JDK or set JAVA_HOME "
        "(no $JAVA_HOME/bin/java and no java on PATH)"
    )


def pyspark_jars_dir() -> Path:
    """``pyspark/jars`` of the installed pyspark wheel (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperJarsNotFoundError(
            "pyspark is not installed; the embedded ZooKeeper runs from pyspark's jars "
            "(pip install pyspark, or point zookeeper.connect at an existing ZooKeeper)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def _pick(jars: Sequence[Path], pattern: str) -> Path | None:
    regex = re.compile(pattern)
    matches = sorted(p for p in jars if regex.fullmatch(p.name))
    return matches[-1] if matches else None


def zookeeper_classpath(jars_dir: Path | None = None) -> list[Path]:
    """The minimal list of jars that runs ``ZooKeeperServerMain`` (see the module docstring).

    Raises :class:`ZooKeeperJarsNotFoundError` naming the missing jar and the directory.
    """
    directory = jars_dir if jars_dir is not None else pyspark_jars_dir()
    if not directory.is_dir():
        raise ZooKeeperJarsNotFoundError(f"jar directory {directory} does not exist")
    jars = [p for p in directory.iterdir() if p.suffix == ".jar"]
    out: list[Path] = []
    for name, pattern in _REQUIRED_JARS:
        jar = _pick(jars, pattern)
        if jar is None:
            raise ZooKeeperJarsNotFoundError(
                f"{name}-*.jar not found in {directory}; the embedded ZooKeeper needs it"
            )
        out.append(jar)
    for group in (_LOG4J_GROUP, *_FALLBACK_BINDINGS):
        picked = [_pick(jars, pattern) for _, pattern in group]
        if all(p is not None for p in picked):
            out.extend(p for p in picked if p is not None)
            break
    else:
        log.warning("no SLF4J binding found in %s; ZooKeeper will log nothing", directory)
    return out


def uses_log4j(classpath: Sequence[Path]) -> bool:
    """Whether the classpath's logging binding is log4j2 (configured by a generated file)."""
    return any(p.name.startswith("log4j-slf4j2-impl-") for p in classpath)


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter word (``ruok``, ``srvr``, ``stat``) and return the reply.

    Raises ``OSError`` when nothing listens on the port.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def zookeeper_is_serving(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when ZooKeeper answers ``ruok`` with ``imok`` and ``srvr`` with a ``Mode:`` line."""
    try:
        if four_letter_word(host, port, "ruok", timeout).strip() != "imok":
            return False
        return "Mode:" in four_letter_word(host, port, "srvr", timeout)
    except OSError:
        return False


def zookeeper_mode(host: str, port: int, timeout: float = 2.0) -> str | None:
    """What ``srvr`` says a node is: ``leader``, ``follower``, ``standalone`` (or
    ``observer``); ``"not serving"`` when it answers without a ``Mode:`` line (an ensemble
    member without a quorum); None when nothing answers on the port."""
    try:
        reply = four_letter_word(host, port, "srvr", timeout)
    except OSError:
        return None
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip() or "not serving"
    return "not serving"


def ensemble_serving(addresses: Iterable[tuple[str, int]], timeout: float = 1.0) -> bool:
    """True when a majority of the nodes at ``addresses`` answers ``srvr`` with a serving
    mode (leader/follower; standalone for a single node): the readiness of an ensemble."""
    nodes = list(addresses)
    serving = sum(1 for h, p in nodes if zookeeper_mode(h, p, timeout) in SERVING_MODES)
    return bool(nodes) and serving >= quorum_size(len(nodes))


def node_with_session(
    addresses: Iterable[tuple[str, int]], session_id: int, timeout: float = 2.0
) -> int | None:
    """The index in ``addresses`` of the node that the ZooKeeper session ``session_id`` is
    connected to (from each node's ``cons`` listing), or None if no node lists it."""
    needle = f"sid=0x{session_id:x},"
    for i, (host, port) in enumerate(addresses):
        try:
            if needle in four_letter_word(host, port, "cons", timeout):
                return i
        except OSError:
            continue
    return None


def parse_connect_string(connect: str) -> list[tuple[str, int]]:
    """``[(host, port), ...]`` of a ``zookeeper.connect`` string (``h1:p1,h2:p2/chroot``);
    a host without a port gets 2181."""
    hosts = connect.partition("/")[0]
    out = []
    for raw in hosts.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        out.append((host, int(port)) if sep and port.isdigit() else (item, 2181))
    return out


def port_is_free(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound (nothing listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class EmbeddedZooKeeper:
    """One ZooKeeper server process, run from pyspark's jars: standalone, or one member of an
    ensemble (``server_id`` and ``servers``).

    Responsibility: write ``zoo.cfg`` (admin server off, four-letter words
    ``ruok,srvr,stat,cons``; an ensemble member's ``server.N`` lines and ``myid``) and
    ``log4j2.properties`` (WARN, to ``log_file``) into ``data_dir``, start the JVM in its
    own session, wait until it serves, and stop it (SIGTERM, then SIGKILL) by its pid.

    Files in ``data_dir``: ``zoo.cfg``, ``myid`` (ensemble members), ``log4j2.properties``,
    ``zookeeper.log`` (default ``log_file``; the JVM's stdout/stderr are appended to it as
    well), ``version-2/`` (ZooKeeper's snapshots and transaction logs).

    An ensemble member serves only once a majority of the members runs: :meth:`start` of one
    member waits for that, so start the others meanwhile (or start them with
    :meth:`start_process` and wait with :func:`ensemble_serving`).

    Concurrency: not thread-safe; one owner calls start/stop. The process outlives nothing:
    the owner must call :meth:`stop` (or use it as a context manager).
    """

    def __init__(
        self,
        port: int,
        data_dir: Path,
        tick_time: int = 2000,
        host: str = "127.0.0.1",
        max_client_cnxns: int = 0,
        log_file: Path | None = None,
        *,
        java: str | None = None,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        log_level: str = "WARN",
        server_id: int | None = None,
        servers: Sequence[QuorumServer] = (),
        init_limit: int = DEFAULT_INIT_LIMIT,
        sync_limit: int = DEFAULT_SYNC_LIMIT,
    ) -> None:
        check_ensemble(server_id, servers)
        self.server_id = server_id
        self.servers = tuple(servers)
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.port = port
        self.data_dir = Path(data_dir).absolute()
        self.tick_time = tick_time
        self.host = host
        self.max_client_cnxns = max_client_cnxns
        self.log_file = Path(log_file).absolute() if log_file else self.data_dir / "zookeeper.log"
        self.log_level = log_level
        self._java = java
        self._jvm_options = tuple(jvm_options)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """``host:port``, the value for ``zookeeper.connect``."""
        return f"{self.host}:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def is_ensemble_member(self) -> bool:
        return bool(self.servers)

    @property
    def main_class(self) -> str:
        return ENSEMBLE_MAIN_CLASS if self.servers else MAIN_CLASS

    @property
    def pid(self) -> int | None:
        """The JVM's pid while started (None before start and after stop)."""
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def prepare(self) -> list[str]:
        """Write ``zoo.cfg`` and the log4j2 config; return the java command line.

        Raises :class:`JavaNotFoundError` or :class:`ZooKeeperJarsNotFoundError`.
        """
        java = self._java or find_java()
        classpath = zookeeper_classpath()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        cfg = zoo_cfg(
            data_dir=self.data_dir,
            port=self.port,
            host=self.host,
            tick_time=self.tick_time,
            max_client_cnxns=self.max_client_cnxns,
            servers=self.servers,
            init_limit=self.init_limit,
            sync_limit=self.sync_limit,
        )
        self.config_file.write_text(cfg)
        if self.servers:
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        cmd = [java, *self._jvm_options]
        if uses_log4j(classpath):
            log4j_cfg = self.data_dir / "log4j2.properties"
            log4j_cfg.write_text(
                "status = error\n"
                "appender.file.type = File\n"
                "appender.file.name = FILE\n"
                f"appender.file.fileName = {self.log_file}\n"
                "appender.file.append = true\n"
                "appender.file.layout.type = PatternLayout\n"
                "appender.file.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n\n"
                f"rootLogger.level = {self.log_level}\n"
                "rootLogger.appenderRef.file.ref = FILE\n"
            )
            cmd.append(f"-Dlog4j2.configurationFile={log4j_cfg}")
        cmd += [
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            os.pathsep.join(str(p) for p in classpath),
            self.main_class,
            str(self.config_file),
        ]
        return cmd

    def start(self, timeout: float = 30) -> None:
        """Start the server and wait until it serves; raise :class:`ZooKeeperStartError`."""
        if self.is_running():
            return
        self.start_process()
        self.wait_serving(timeout)

    def start_process(self) -> None:
        """Start the JVM without waiting for it to serve (an ensemble member needs its peers
        before it serves). Raises :class:`ZooKeeperStartError` if the port is taken."""
        if self.is_running():
            return
        if not port_is_free(self.host, self.port):
            raise ZooKeeperStartError(
                f"cannot start ZooKeeper on {self.connect_string}: the port is already in use"
            )
        cmd = self.prepare()
        log.info("starting ZooKeeper on %s (data dir %s)", self.connect_string, self.data_dir)
        with self.log_file.open("ab") as out:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )

    def wait_serving(self, timeout: float = 30) -> None:
        """Until the started server serves; stops it and raises :class:`ZooKeeperStartError`
        if it exits or does not serve within ``timeout`` s."""
        if self._proc is None:
            raise ZooKeeperStartError(f"ZooKeeper on {self.connect_string} was not started")
        deadline = time.monotonic() + timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} exited with code {code} during start-up "
                    f"(Java 11+ needed). Last lines of {self.log_file}:\n{tail(self.log_file)}"
                )
            if zookeeper_is_serving(self.host, self.port, timeout=1.0):
                log.info("ZooKeeper serving on %s (pid %d)", self.connect_string, self._proc.pid)
                return
            if time.monotonic() >= deadline:
                self.stop()
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} did not answer ruok/srvr within "
                    f"{timeout:g}s. Last lines of {self.log_file}:\n{tail(self.log_file)}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM the JVM, wait up to ``timeout`` s, then SIGKILL and wait. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    log.warning("ZooKeeper pid %d ignored SIGTERM; killing it", proc.pid)
                    proc.kill()
                    proc.wait(timeout=timeout)
        finally:
            self._proc = None
        log.info("ZooKeeper on %s stopped", self.connect_string)

    def __enter__(self) -> EmbeddedZooKeeper:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        # Last resort for an owner that forgot stop(): never leave a JVM behind.
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
