"""What ``docs/operations.md`` ("Several hosts") and ``docs/systemd/*.service`` tell an
operator to run is what Millrace accepts: the units' commands parse with the ``millrace``
command's own parser, ``systemd-analyze verify`` finds nothing to say about the units (where
it is installed), the broker properties shown pass the broker's configuration checks, and
the ZooKeeper properties shown are those ``tests/fault/test_several_hosts.py`` runs with."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.cli.main import build_parser
from broker.config import BrokerConfig

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "docs" / "systemd"
VENV = "/opt/millrace/.venv"


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return parser


def _section(title: str) -> str:
    text = (REPO / "docs" / "operations.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _properties_blocks() -> list[dict[str, str]]:
    blocks = re.findall(r"```properties\n(.*?)```", _section("Several hosts"), re.S)
    return [
        dict(line.split("=", 1) for line in block.splitlines() if line and line[0] not in "#!")
        for block in blocks
    ]


@pytest.mark.parametrize(
    ("unit", "command"),
    [("millrace-broker.service", "broker"), ("millrace-zookeeper.service", "zookeeper")],
)
def test_unit_runs_millrace_from_the_venv_and_stops_with_sigterm(unit: str, command: str) -> None:
    service = _unit(unit)["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == f"{VENV}/bin/millrace"
    assert argv[1:3] == [command, "start"]
    args = build_parser().parse_args(argv[1:])
    assert args.func.__module__ == f"broker.cli.{command}_cmd"
    assert service["ExecStop"] == "/bin/kill -TERM $MAINPID"
    assert service["KillMode"] == "mixed"  # SIGTERM to the main process only
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"  # configuration errors
    assert int(service["LimitNOFILE"]) >= 65536
    assert int(service["TimeoutStopSec"]) >= 60


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """With the venv path pointing at this checkout's (verify wants the executables)."""
    venv = str(Path(sys.executable).parent.parent)
    for unit in sorted(UNITS.glob("*.service")):
        (tmp_path / unit.name).write_text(unit.read_text().replace(VENV, venv))
    proc = subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(p) for p in tmp_path.glob("*.service"))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), (
        proc.stdout + proc.stderr
    )


def test_documented_broker_properties_are_valid() -> None:
    brokers = [b for b in _properties_blocks() if "dataDir" not in b]
    assert len(brokers) >= 2
    for props in brokers:
        BrokerConfig(props)
    full = next(b for b in brokers if "broker.id" in b)
    cfg = BrokerConfig(full)
    assert cfg["broker.rack"] == "r1"
    assert cfg["zookeeper.connect"].endswith("/millrace")
    assert str(cfg.advertised_listeners[0]) == "PLAINTEXT://10.0.0.11:9092"


def test_documented_zookeeper_properties_are_the_tested_ones() -> None:
    from tests.fault.several_hosts import Hosts

    [documented] = [b for b in _properties_blocks() if "dataDir" in b]

    class _Node:
        def __init__(self, index: int) -> None:
            self.ip = f"10.0.0.{index}"

    class _Topology:
        nodes = {f"zk{i}": _Node(i) for i in (1, 2, 3)}

    tested = Hosts(_Topology(), Path("/var/lib/millrace"), 3).zookeeper_properties(1)  # type: ignore[arg-type]
    assert set(documented) == set(tested)
    servers = {k: v for k, v in documented.items() if k.startswith("server.")}
    assert servers == {k: v for k, v in tested.items() if k.startswith("server.")}
