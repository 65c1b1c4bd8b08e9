"""The unmodified Kafka Java client (3.9 and 4.x, fetched by ``make setup``) against a real
Millrace broker: admin, an idempotent lz4 producer with acks=all, and a consumer that
checks every record, offsetsForTimes and end offsets (jvm/ClientCheck.java)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JVM = ROOT / ".cache" / "jvm"


def _classpath(major: str) -> str:
    deps = sorted(p for p in (JVM / "kafka-4").glob("*.jar") if "kafka-clients" not in p.name)
    clients = sorted((JVM / f"kafka-{major}").glob("kafka-clients-*.jar"))
    assert clients and deps, f"Kafka Java clients missing in {JVM}: run `make setup`"
    return ":".join(str(p) for p in [clients[0], *deps])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("major", ["3", "4"])
def test_java_client_produces_and_consumes(cluster, major: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"java-client-{major}"
    result = subprocess.run(
        [
            "java",
            "-cp",
            _classpath(major),
            str(ROOT / "jvm" / "ClientCheck.java"),
            cluster.bootstrap,
            topic,
            "3000",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert result.returncode == 0 and "OK 3000" in result.stdout, (
        f"Java client {major}.x failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    )
