"""Apache Kafka 3.9.1's own Java tools (``make setup`` fetches the distribution into
``.cache/jvm/kafka-dist``), run unchanged the way the ``bin/kafka-*.sh`` wrappers run them:
``java -cp "<dist>/*" <main class> ARGS``, with a log4j 1.x file sending WARN and above to
stderr."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.harness.processes import kill_pid

ROOT = Path(__file__).resolve().parents[2]
KAFKA_DIST = ROOT / ".cache" / "jvm" / "kafka-dist"
TOOLS = "org.apache.kafka.tools."

LOG4J = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

Tool = Callable[..., subprocess.CompletedProcess[str]]


def kafka_tool_runner(work_dir: Path) -> Tool:
    """``run(main_class, *args, timeout_s=60)``: run one Kafka tool to completion."""
    java = shutil.which("java")
    assert java, "no `java` on PATH (the Kafka tools need a JRE)"
    jars = {p.name for p in KAFKA_DIST.glob("*.jar")}
    assert "kafka-tools-3.9.1.jar" in jars and "kafka-clients-3.9.1.jar" in jars, (
        f"Kafka 3.9.1 distribution missing in {KAFKA_DIST}: run `make setup`"
    )
    log4j = work_dir / "log4j.properties"
    log4j.write_text(LOG4J)

    def run(main_class: str, *args: str, timeout_s: float = 60.0) -> Any:
        cmd = [
            java,
            "-Xmx512m",
            f"-Dlog4j.configuration=file:{log4j}",
            "-cp",
            f"{KAFKA_DIST}/*",
            main_class,
            *args,
        ]
        return subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd=ROOT,
        )

    return run


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert the tool exited 0; return its stdout."""
    assert proc.returncode == 0, (
        f"{proc.args[5].rsplit('.', 1)[-1]} {' '.join(proc.args[6:])} exited "
        f"{proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}\n"
        f"--- stderr ---\n{proc.stderr[-5000:]}"
    )
    return proc.stdout


# --- an Apache Kafka 3.9.1 broker process --------------------------------------------------

KAFKA_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


CONNECTING = ("(org.apache.kafka.clients.NetworkClient)", "(kafka.controller.RequestSendThread)")


def start_kafka_broker(home: Path, props: dict[str, str]) -> subprocess.Popen[bytes]:
    """Apache Kafka 3.9.1 (``kafka.Kafka server.properties``, as bench/systems.py starts it),
    its output (WARN and above) in ``home/kafka.out``."""
    java = shutil.which("java")
    assert java, "no `java` on PATH"
    assert any(KAFKA_DIST.glob("kafka_2.13-3.9.1.jar")), f"no Kafka 3.9.1 in {KAFKA_DIST}"
    (home / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (home / "log4j.properties").write_text(KAFKA_LOG4J)
    with (home / "kafka.out").open("wb") as out:
        return subprocess.Popen(
            [
                java,
                "-Xmx512m",
                f"-Dlog4j.configuration=file:{home / 'log4j.properties'}",
                f"-Dkafka.logs.dir={home}",
                "-cp",
                f"{KAFKA_DIST}/*",
                "kafka.Kafka",
                str(home / "server.properties"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_kafka_broker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (controlled shutdown), SIGKILL after 60 s; by the JVM's own pid."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            kill_pid(proc.pid)
            proc.wait()
