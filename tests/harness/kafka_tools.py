"""Apache Kafka 3.9.1's own Java tools (``make setup`` fetches the distribution into
``.cache/jvm/kafka-dist``), run unchanged the way the ``bin/kafka-*.sh`` wrappers run them:
``java -cp "<dist>/*" <main class> ARGS``, with a log4j 1.x file sending WARN and above to
stderr."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
