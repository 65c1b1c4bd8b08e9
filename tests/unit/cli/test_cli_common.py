"""``broker.cli.common``: the one error path of the ``millrace`` commands (``fail``,
``guard``), the connection options and the client configuration built from them, the
argument types and the table layout. No cluster: where a command runs, it fails before
reaching one."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from broker.cli.client_settings import admin_client, client_config
from broker.cli.common import (
    CliError,
    Column,
    add_connection_options,
    fail,
    format_table,
    guard,
    kafka_error_code,
    kafka_error_text,
    non_negative_int,
    parse_key_values,
    positive_int,
    read_properties_file,
    resolve_bootstrap,
)
from broker.cli.main import main

pytestmark = pytest.mark.unit


# --- the error path ------------------------------------------------------------------------


def test_fail_writes_one_line_naming_the_program(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail("millrace x", "it broke") == 1
    assert fail("millrace x", "bad config", code=2) == 2
    assert capsys.readouterr().err == "millrace x: it broke\nmillrace x: bad config\n"


def _run(func: Any) -> Any:
    return guard("millrace t")(func)(argparse.Namespace())


def test_guard_passes_the_exit_code_and_keeps_the_docstring() -> None:
    def command(_args: argparse.Namespace) -> int:
        """Doc."""
        return 3

    assert guard("millrace t")(command).__doc__ == "Doc."
    assert _run(command) == 3


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (CliError("--topic x: no such topic"), "--topic x: no such topic"),
        (
            KafkaException(KafkaError(KafkaError._TIMED_OUT)),
            "Local: Timed out (_TIMED_OUT)",
        ),
        (ConnectionRefusedError("refused"), "connection failed: refused"),
        (TimeoutError(), "connection failed: TimeoutError"),
    ],
)
def test_guard_turns_errors_into_one_line_and_exit_code_1(
    exc: BaseException, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def command(_args: argparse.Namespace) -> int:
        raise exc

    assert _run(command) == 1
    assert capsys.readouterr().err == f"millrace t: {message}\n"


@pytest.mark.parametrize("exc", [ValueError("bug"), SystemExit(2), KeyboardInterrupt()])
def test_guard_lets_other_exceptions_through(exc: BaseException) -> None:
    def command(_args: argparse.Namespace) -> int:
        raise exc

    with pytest.raises(type(exc)):
        _run(command)


def test_guard_without_confluent_kafka_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that never imported confluent-kafka cannot raise its exceptions; the guard
    does not import it to find out."""
    monkeypatch.delitem(sys.modules, "confluent_kafka")

    def command(_args: argparse.Namespace) -> int:
        raise CliError("x")

    assert _run(command) == 1
    assert "confluent_kafka" not in sys.modules


def test_kafka_error_text_and_code() -> None:
    exc = KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "Topic 't' exists"))
    assert kafka_error_text(exc) == "Topic 't' exists (TOPIC_ALREADY_EXISTS)"
    assert kafka_error_code(exc) == "TOPIC_ALREADY_EXISTS"
    assert kafka_error_text(KafkaError(KafkaError._TIMED_OUT)) == "Local: Timed out (_TIMED_OUT)"
    assert kafka_error_text(RuntimeError("plain")) == "plain"
    assert kafka_error_text(RuntimeError()) == "RuntimeError"
    assert kafka_error_code(RuntimeError("plain")) is None


# --- connection options --------------------------------------------------------------------


def _parser(**flags: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p", exit_on_error=False)
    add_connection_options(parser, **flags)
    return parser


def test_connection_options_kafka_names_and_defaults() -> None:
    args = _parser().parse_args(
        ["--bootstrap-server", "h:1,h:2", "--dir", "D", "--command-config", "F"]
    )
    assert (args.bootstrap_server, args.dir, args.command_config) == ("h:1,h:2", "D", "F")
    assert not hasattr(args, "timeout")
    args = _parser(timeout=True).parse_args([])
    assert args.bootstrap_server is None and args.dir is None and args.timeout == 30.0
    assert _parser(timeout=True).parse_args(["--timeout", "2.5"]).timeout == 2.5


def test_connection_options_without_command_config() -> None:
    args = _parser(command_config=False, timeout=True).parse_args(["--dir", "D"])
    assert not hasattr(args, "command_config")
    with pytest.raises(SystemExit):
        _parser(command_config=False).parse_args(["--command-config", "F"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not found (is the cluster up?)"),
        ("not json", "cannot read bootstrap_servers"),
        ('{"zookeeper": "x"}', "cannot read bootstrap_servers"),
        ('{"bootstrap_servers": ""}', "has no bootstrap_servers"),
    ],
)
def test_resolve_bootstrap_bad_dir(tmp_path: Path, content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / "cluster.json").write_text(content)
    with pytest.raises(CliError, match=r"^--dir ") as info:
        resolve_bootstrap(None, str(tmp_path))
    assert message in str(info.value)


def test_client_config(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# comment\n! other comment\n\nclient.id = cli\nacks: all\nlinger.ms 5\n")
    args = argparse.Namespace(
        bootstrap_server="h:1", dir=None, command_config=str(props), log_level="WARNING"
    )
    conf = client_config(args, {"acks": "1"})
    assert conf == {
        "bootstrap.servers": "h:1",
        "log_level": 0,
        "client.id": "cli",
        "acks": "1",  # extra wins over --command-config
        "linger.ms": "5",
    }
    verbose = client_config(argparse.Namespace(bootstrap_server="h:1", log_level="debug"))
    assert isinstance(verbose["logger"], logging.Logger) and "log_level" not in verbose


def test_admin_client_uses_the_connection_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import confluent_kafka.admin

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", seen.append)
    admin_client(argparse.Namespace(bootstrap_server="h:9", dir=None))
    assert seen and seen[0]["bootstrap.servers"] == "h:9"


# --- argument helpers ----------------------------------------------------------------------


def test_parse_key_values() -> None:
    assert parse_key_values(["a=1", " b =x=y", "c="], "--config") == {"a": "1", "b": "x=y", "c": ""}
    for bad in ("novalue", "=v", " =v"):
        with pytest.raises(CliError, match=r"^--config .*expected KEY=VALUE"):
            parse_key_values([bad], "--config")


def test_read_properties_file_errors_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(CliError, match=r"^--producer.config .*missing.properties: No such file"):
        read_properties_file(str(tmp_path / "missing.properties"), "--producer.config")
    bad = tmp_path / "bad.properties"
    bad.write_text("=oops\n")
    with pytest.raises(CliError, match="cannot parse line"):
        read_properties_file(str(bad), "--command-config")


def test_integer_types() -> None:
    assert positive_int("3") == 3 and non_negative_int("0") == 0
    for func, text, message in (
        (positive_int, "0", "must be at least 1"),
        (positive_int, "-2", "must be at least 1"),
        (non_negative_int, "-1", "must not be negative"),
        (positive_int, "x", "is not an integer"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            func(text)


# --- tables --------------------------------------------------------------------------------


def test_format_table_widths_alignment_and_missing_cells() -> None:
    columns = (Column("NAME", 6, fit=True), Column("N", 3, align=">"), Column("NOTE"))
    lines = format_table(columns, [("a", 1, None), ("longer-name", 12345, "x")])
    assert lines == [
        "NAME          N NOTE",
        "a             1 -",
        "longer-name 12345 x",  # a fixed-width column overflows, the fit one widens
    ]
    assert format_table((Column("A", 4), Column("B", 4)), [("x", "")]) == ["A    B", "x"]


# --- through the command line --------------------------------------------------------------


@pytest.mark.parametrize(
    ("prog", "argv"),
    [
        ("millrace topics", ["topics", "list"]),
        ("millrace groups", ["groups", "list"]),
        ("millrace reassign", ["reassign", "--list"]),
        (
            "millrace elect-leaders",
            ["elect-leaders", "--election-type", "preferred", "--all-topic-partitions"],
        ),
        ("millrace consume", ["consume", "--topic", "t"]),
        ("millrace perf consume", ["perf", "consume", "--topic", "t", "--messages", "1"]),
    ],
)
def test_commands_report_a_bad_dir_on_one_line(
    prog: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"{prog}: --dir {tmp_path}: {tmp_path / 'cluster.json'} not found (is the cluster up?)\n"
    )
