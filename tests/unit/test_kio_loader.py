"""``broker``, ``spark_connector`` and ``kafka_security`` import ``kio`` without the Hypothesis
hooks (``kio_loader``): a process that imports one of them (a broker, a Spark Python worker)
loads neither Hypothesis nor what it pulls in, and writes no ``.hypothesis/`` directory, while
Hypothesis stays importable. Each check runs in a fresh
interpreter (the test process itself imported both long ago)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, cwd: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def test_the_broker_does_not_load_hypothesis(tmp_path: Path) -> None:
    out = _run(
        "import sys\n"
        "import broker.server\n"
        "import kio.static._phantom as phantom\n"
        "print(phantom.hypothesis is None, 'hypothesis' in sys.modules, 'pytest' in sys.modules)\n"
        "import hypothesis.strategies\n"  # still importable afterwards
        "print(hypothesis.strategies.integers().example() is not None)\n",
        tmp_path,
    )
    assert out.splitlines() == ["True False False", "True"]


def test_no_hypothesis_directory_in_the_working_directory(tmp_path: Path) -> None:
    _run("import broker.server", tmp_path)
    assert not (tmp_path / ".hypothesis").exists()


def test_kio_imported_first_keeps_its_hooks(tmp_path: Path) -> None:
    out = _run(
        "import kio.static._phantom as phantom\n"
        "from kio_loader import import_kio_without_hypothesis\n"
        "print(import_kio_without_hypothesis(), phantom.hypothesis is not None)\n",
        tmp_path,
    )
    assert out == "False True"


def test_hypothesis_imported_before_the_broker_is_restored(tmp_path: Path) -> None:
    out = _run(
        "import sys\n"
        "import hypothesis.strategies as st\n"
        "import broker.protocol.errors\n"
        "import kio.static._phantom as phantom\n"
        "print(phantom.hypothesis is None, sys.modules['hypothesis.strategies'] is st)\n",
        tmp_path,
    )
    assert out == "True True"


@pytest.mark.parametrize(
    "first_import",
    [
        # what a Spark Python worker of a format("millrace") read imports, then a request
        "import spark_connector.read.reader, spark_connector.kafka.cluster",
        # the shared security package, used by the broker, the tools and the connector
        "import kafka_security.client_security",
    ],
)
def test_the_connector_and_security_packages_do_not_load_hypothesis(
    tmp_path: Path, first_import: str
) -> None:
    out = _run(
        "import sys\n"
        f"{first_import}\n"
        "from kio.schema.metadata.v9.request import MetadataRequest\n"
        "import kio.static._phantom as phantom\n"
        "print(phantom.hypothesis is None, 'hypothesis' in sys.modules)\n",
        tmp_path,
    )
    assert out == "True False"
    assert not (tmp_path / ".hypothesis").exists()
