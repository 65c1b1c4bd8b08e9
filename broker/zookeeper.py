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
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
FOUR_LETTER_WORDS = "ruok,srvr,stat"
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
    """One standalone ZooKeeper server process, run from pyspark's jars.

    Responsibility: write ``zoo.cfg`` (admin server off, four-letter words ``ruok,srvr,stat``)
    and ``log4j2.properties`` (WARN, to ``log_file``) into ``data_dir``, start the JVM in its
    own session, wait until it serves, and stop it (SIGTERM, then SIGKILL) by its pid.

    Files in ``data_dir``: ``zoo.cfg``, ``log4j2.properties``, ``zookeeper.log`` (default
    ``log_file``; the JVM's stdout/stderr are appended to it as well), ``version-2/``
    (ZooKeeper's snapshots and transaction logs).

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
    ) -> None:
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
        cfg = (
            "# Written by millrace (broker/zookeeper.py); rewritten at every start.\n"
            f"tickTime={self.tick_time}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            f"maxClientCnxns={self.max_client_cnxns}\n"
            "admin.enableServer=false\n"
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}\n"
        )
        self.config_file.write_text(cfg)
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
            MAIN_CLASS,
            str(self.config_file),
        ]
        return cmd

    def start(self, timeout: float = 30) -> None:
        """Start the server and wait until it serves; raise :class:`ZooKeeperStartError`."""
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
