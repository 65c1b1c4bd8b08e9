"""What the ``millrace`` admin and client commands share: one error path, the connection
options and the clients built from them, and small argument and output helpers.

Error path: a command reports a failure as one line ``<prog>: <message>`` on stderr and
exits 1 (:func:`fail`). Code deep inside a command raises :class:`CliError` instead;
:func:`guard` wraps a command's ``func`` and turns a CliError, a confluent-kafka
``KafkaException`` that escaped, or a connection error into that line. Bad usage is
argparse's business (``parser.error``: usage, message, exit code 2) and is never caught here.

Connection options (Kafka's tool names), defined once in :func:`add_connection_options`:
``--bootstrap-server HOST:PORT[,HOST:PORT]``, else ``bootstrap_servers`` of
``--dir D``'s ``cluster.json`` (written by ``millrace cluster up``), else
``$MILLRACE_BOOTSTRAP``, else ``127.0.0.1:9092`` (:func:`resolve_bootstrap`);
``--command-config FILE`` (client settings in a ``.properties`` file, Kafka's Java names or
librdkafka's; without it, ``--dir``'s ``cluster.json`` ``client_config``); ``--timeout
SECONDS`` (default 30) for the admin commands. :mod:`broker.cli.client_settings` turns them
into a librdkafka configuration (``client_config``) and confluent-kafka's ``AdminClient``
(``admin_client``); it builds on this module, never the other way round.

Nothing here imports confluent-kafka at module level (``millrace --help`` stays fast).
Everything is synchronous and runs in the command's one thread.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "MILLRACE_BOOTSTRAP"
DEFAULT_TIMEOUT_S = 30.0
MISSING = "-"

Command = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A failure to report as one line on stderr with exit code 1."""


# --- the error path ------------------------------------------------------------------------


def fail(prog: str, message: str, code: int = 1) -> int:
    """Write ``<prog>: <message>`` on stderr and return ``code`` (the exit code)."""
    sys.stderr.write(f"{prog}: {message}\n")
    return code


def kafka_error_text(error: object) -> str:
    """One line for a confluent-kafka ``KafkaException`` (its ``KafkaError`` if it carries
    one) or a ``KafkaError``: ``<description> (<NAME>)``."""
    err = error.args[0] if isinstance(error, BaseException) and error.args else error
    describe = getattr(err, "str", None)
    name = getattr(err, "name", None)
    if callable(describe) and callable(name):
        return f"{describe()} ({name()})"
    if isinstance(error, BaseException):
        return str(error) or type(error).__name__
    return str(error)


def kafka_error_code(exc: BaseException) -> str | None:
    """The name of a confluent-kafka exception's ``KafkaError`` (``TOPIC_ALREADY_EXISTS``),
    or None."""
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return str(name()) if callable(name) else None


def _kafka_exceptions() -> tuple[type[BaseException], ...]:
    """confluent-kafka's KafkaException if it was imported (else nothing can raise it)."""
    module = sys.modules.get("confluent_kafka")
    kafka_exception = getattr(module, "KafkaException", None)
    return (kafka_exception,) if isinstance(kafka_exception, type) else ()


def guard(prog: str) -> Callable[[Command], Command]:
    """Decorator for a command's ``func``: a :class:`CliError`, a ``KafkaException`` or a
    connection error (``ConnectionError``, ``TimeoutError``) becomes one line
    ``<prog>: <message>`` on stderr and exit code 1."""

    def decorate(func: Command) -> Command:
        @functools.wraps(func)
        def wrapper(args: argparse.Namespace) -> int:
            try:
                return int(func(args))
            except CliError as exc:
                return fail(prog, str(exc))
            except (ConnectionError, TimeoutError) as exc:
                return fail(prog, f"connection failed: {str(exc) or type(exc).__name__}")
            except _kafka_exceptions() as exc:
                return fail(prog, kafka_error_text(exc))

        return wrapper

    return decorate


# --- connection options and clients --------------------------------------------------------


def add_connection_options(
    parser: argparse.ArgumentParser, *, command_config: bool = True, timeout: bool = False
) -> None:
    """Add ``--bootstrap-server`` and ``--dir``, then ``--command-config`` (for commands
    that use confluent-kafka) and ``--timeout SECONDS`` (for the admin commands)."""
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to connect to (default: --dir's cluster.json, else $"
        f"{BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--dir", metavar="D", help="cluster directory of `millrace cluster up` (reads cluster.json)"
    )
    if command_config:
        parser.add_argument(
            "--command-config",
            metavar="FILE",
            help="properties file of client settings (security.protocol, sasl.jaas.config, "
            "ssl.truststore.location ...: Kafka's Java names or librdkafka's; default: --dir's "
            "cluster.json client_config)",
        )
    if timeout:
        parser.add_argument(
            "--timeout",
            type=float,
            default=DEFAULT_TIMEOUT_S,
            metavar="SECONDS",
            help=f"request timeout (default {DEFAULT_TIMEOUT_S:g})",
        )


def resolve_bootstrap(bootstrap: str | None, cluster_dir: str | None) -> str:
    """The bootstrap servers: explicit, else ``cluster.json`` of ``cluster_dir``, else the
    ``MILLRACE_BOOTSTRAP`` environment variable, else ``127.0.0.1:9092``."""
    if bootstrap:
        return bootstrap
    if cluster_dir:
        path = Path(cluster_dir) / "cluster.json"
        try:
            servers = json.loads(path.read_text())["bootstrap_servers"]
        except FileNotFoundError as exc:
            raise CliError(f"--dir {cluster_dir}: {path} not found (is the cluster up?)") from exc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CliError(
                f"--dir {cluster_dir}: cannot read bootstrap_servers from {path}: {exc}"
            ) from exc
        if not isinstance(servers, str) or not servers:
            raise CliError(f"--dir {cluster_dir}: {path} has no bootstrap_servers")
        return servers
    return os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (IPv6 as ``[::1]:9092``) -> ``[("h1", 9092), ("h2", 9093)]``."""
    out: list[tuple[str, int]] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise CliError(f"--bootstrap-server {text!r}: expected HOST:PORT[,HOST:PORT]")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise CliError(f"--bootstrap-server {text!r}: expected HOST:PORT[,HOST:PORT]")
    return out


def bootstrap_servers(args: argparse.Namespace) -> str:
    """:func:`resolve_bootstrap` of the parsed connection options."""
    return resolve_bootstrap(getattr(args, "bootstrap_server", None), getattr(args, "dir", None))


# --- argument helpers ----------------------------------------------------------------------


def integer(text: str) -> int:
    """argparse type: any integer."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def parse_key_values(items: Iterable[str], option: str) -> dict[str, str]:
    """Parse ``k=v`` strings (values may contain ``=``); a malformed one raises CliError."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{option} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def read_text_file(path: str, option: str) -> str:
    """The text of the file an option names; unreadable raises CliError naming both."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise CliError(f"{option} {path}: {exc.strerror or exc}") from exc


def read_properties_file(path: str, option: str) -> dict[str, str]:
    r"""Read a Java ``.properties`` file: ``k=v``, ``k: v`` or ``k v``; ``#``/``!`` comments;
    a line ending in a backslash continues on the next; ``\\``, ``\=``, ``\:``, ``\t``,
    ``\n`` and ``\uXXXX`` escapes. A line without a key raises CliError."""
    text = read_text_file(path, option)
    out: dict[str, str] = {}
    for raw, line in _logical_lines(text):
        key, value = _split_property(line)
        if not key:
            raise CliError(f"{option} {path}: cannot parse line {raw!r}")
        out[key] = value
    return out


def _logical_lines(text: str) -> Iterable[tuple[str, str]]:
    """(the first physical line, the logical line) of each non-blank, non-comment line."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        first = lines[i]
        line = first.lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):
            line = line[:-1]
        yield first, line


def _continues(line: str) -> bool:
    """Whether ``line`` ends in an odd number of backslashes (a continuation)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape_property(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_property(line: str) -> tuple[str, str]:
    """(key, value) of a logical line, Java's way: the key ends at the first unescaped
    ``=``, ``:`` or blank; one ``=``/``:`` and the blanks around it separate."""
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape_property(key).strip(), _unescape_property(rest.rstrip())


# --- output helpers ------------------------------------------------------------------------


def cell_text(value: object) -> str:
    """A table cell: ``-`` for None (unknown), else ``str(value)``."""
    return MISSING if value is None else str(value)


def ids_text(ids: Iterable[int]) -> str:
    """Broker ids as Kafka's tools print them: ``1,2,3``."""
    return ",".join(str(i) for i in ids)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of :func:`format_table`: its heading, its width (cells are padded to it,
    a longer cell overflows it), whether it widens to its longest cell (``fit``), and its
    alignment (``<`` left, ``>`` right)."""

    heading: str
    width: int = 0
    fit: bool = False
    align: str = "<"


def format_table(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> list[str]:
    """The heading line and one line per row, as Kafka's tools print tables: cells
    (:func:`cell_text`) padded to their column's width and joined by one space, trailing
    blanks stripped. A ``fit`` column is as wide as its longest cell (headings excluded)
    when that exceeds ``width``."""
    texts = [[cell_text(cell) for cell in row] for row in rows]
    widths = [
        max([c.width] + [len(row[i]) for row in texts]) if c.fit else c.width
        for i, c in enumerate(columns)
    ]

    def line(cells: Sequence[str]) -> str:
        return " ".join(
            f"{cell:{c.align}{w}}" for cell, c, w in zip(cells, columns, widths, strict=True)
        ).rstrip()

    return [line([c.heading for c in columns])] + [line(row) for row in texts]


def silence_stdout() -> None:
    """After a reader closed our stdout (``| head``), point it at /dev/null so the final
    flush at exit does not raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
