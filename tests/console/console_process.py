"""``millrace console`` as a separate process for tests: started with the given options,
its URL read from the one line it prints, stopped by its pid (SIGTERM, then SIGKILL); and a
plain HTTP GET/POST with urllib for the tests that need no browser."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Console:
    """One ``millrace console ARGS`` process (stopped by its pid)."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        # stderr to a file, not a pipe nobody drains (a full pipe would block the server)
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker.cli.main", "console", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        line: list[str] = []
        reader = threading.Thread(
            target=lambda: line.append(self.proc.stdout.readline() if self.proc.stdout else ""),
            daemon=True,
        )
        reader.start()
        reader.join(30)
        if not line or not line[0].startswith("Millrace console on http://"):
            err = self.stop()
            raise AssertionError(f"console did not print its URL: {line!r} {err}")
        self.url = line[0].split(" on ", 1)[1].strip().rstrip("/")

    def stop(self) -> str:
        """Stop the process (by its pid); its stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.stderr.closed:
            return ""
        self.stderr.seek(0)
        text = self.stderr.read()
        self.stderr.close()
        return text

    def get(self, path: str, timeout_s: float = 30.0) -> tuple[int, str]:
        return http(self.url + path, timeout_s=timeout_s)


def http(
    url: str,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> tuple[int, str]:
    """(status, body) of a GET (or a POST with ``data``); HTTP errors are answers too."""
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
