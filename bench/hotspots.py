"""Where a running broker spends its CPU: a py-spy sampling profile of one process, summarised.

How it is measured: ``start`` runs ``py-spy record --pid PID --rate RATE --format raw
--full-filenames --nonblocking`` in the background (py-spy reads the target's memory from outside;
it needs ptrace permission on the target, which root or ``kernel.yama.ptrace_scope=0`` gives);
``stop`` sends it SIGINT, on which py-spy writes the file. Without ``--idle`` py-spy keeps only
samples of threads that are running, so the profile is on-CPU time, not time waiting in
``epoll``. ``--nonblocking`` does not pause the broker for each sample: cheaper and the broker's
throughput stays as it was, but a sample taken while the stack changes can mix two stacks (a
caller's frame under a callee it never called); at a few hundred samples per second those are
noise. Where attaching to a running pid is not allowed, ``launch_profiled`` starts the broker
as py-spy's own child (``py-spy record ... -- CMD``), which needs no ptrace permission beyond
the parent's own.

``summarize`` reads py-spy's raw output, one collapsed stack per line::

    <module> (/x/run.py:7);main (/x/run.py:3);work (/x/lib/work.py:12) 42

(root first, leaf last, then the number of samples) and counts, per function (file and
qualified name; the line number dropped): *self* samples, where the function is the leaf, i.e.
was running itself; *inclusive* samples, where it is anywhere on the stack (once per stack, so
recursion does not count twice); and self samples per source file. Files are shortened to the
part after ``site-packages/``, after the repository root (``broker/log/segment.py``), or, for
the standard library, to ``<stdlib> asyncio/selector_events.py``.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
# Samples of a running thread with no Python frame: seen while an exiting interpreter finalises.
NO_FRAME = "<no Python frame>"

_FRAME = re.compile(r"(?P<func>.+?) \((?P<file>.*)\)")
_LINENO = re.compile(r"(?P<file>.*):\d+")
# Frames py-spy puts at the root with --threads / --subprocesses: not functions.
_HEADER = re.compile(r'thread \(0x[0-9a-fA-F]+\)|process \d+:".*"')
_SITE = re.compile(r".*/(?:site|dist)-packages/(?P<rest>.+)")
_STDLIB = re.compile(r".*/lib/python\d+\.\d+t?/(?P<rest>.+)")


class Row(NamedTuple):
    label: str
    samples: int
    share: float


@dataclass(frozen=True)
class Profile:
    total: int
    self_time: tuple[Row, ...]
    inclusive: tuple[Row, ...]
    by_file: tuple[Row, ...]


@dataclass(frozen=True)
class _Run:
    out: Path
    log: IO[bytes]


_RUNS: dict[int, _Run] = {}


def py_spy() -> str:
    """The py-spy beside this interpreter (``make setup`` installs it in .venv), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    found = shutil.which("py-spy")
    if found is None:
        raise FileNotFoundError("py-spy is not installed: run `make setup`")
    return found


def _record_args(out: Path, rate: int, nonblocking: bool) -> list[str]:
    args = [py_spy(), "record", "--rate", str(rate), "--format", "raw"]
    args += ["--output", str(out), "--full-filenames"]
    return [*args, "--nonblocking"] if nonblocking else args


def _spawn(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    # py-spy's messages (and a launched target's output): read by stop() if it fails, closed there.
    log = tempfile.TemporaryFile()  # noqa: SIM115
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    except BaseException:
        log.close()
        raise
    _RUNS[proc.pid] = _Run(out, log)
    return proc


def start(
    pid: int, out: Path, rate: int = 200, nonblocking: bool = True
) -> subprocess.Popen[bytes]:
    """Start sampling process ``pid`` in the background; ``stop`` ends it and writes ``out``."""
    return _spawn([*_record_args(out, rate, nonblocking), "--pid", str(pid)], out)


def launch_profiled(
    cmd: list[str], out: Path, rate: int = 200, nonblocking: bool = True
) -> subprocess.Popen[bytes]:
    """Run ``cmd`` as py-spy's child, sampled from its start (``py-spy record ... -- CMD``): the
    fallback where attaching to a running pid is not permitted. The target's output goes to the
    log that ``stop`` reports on failure; ``child_pid`` gives the target's pid. Stop the target
    (the profile ends when it exits) and then call ``stop``; or call ``stop`` directly, after
    which py-spy (0.4.3) has ended the target too."""
    return _spawn([*_record_args(out, rate, nonblocking), "--", *cmd], out)


def child_pid(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """The pid of the program ``launch_profiled`` started under py-spy (Linux /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        children: list[int] = []
        for task in Path(f"/proc/{proc.pid}/task").glob("*/children"):
            try:
                children += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
        if children:
            return min(children)
        time.sleep(0.05)
    raise RuntimeError(f"py-spy (pid {proc.pid}) has no child process")


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """End a ``start``/``launch_profiled`` recording: SIGINT, on which py-spy writes its output
    and exits. If the profiled process exited first, py-spy has already written it and stopped.
    Raises RuntimeError with py-spy's messages if no profile was written."""
    run = _RUNS.pop(proc.pid, None)
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"py-spy did not stop within {timeout:.0f} s of SIGINT") from None
        if run is None:
            return
        if proc.returncode != 0 or not run.out.exists():
            run.log.seek(0)
            messages = run.log.read().decode(errors="replace").strip()[-2000:]
            raise RuntimeError(f"py-spy exited with {proc.returncode}, no profile:\n{messages}")
    finally:
        if run is not None:
            run.log.close()


def short_path(filename: str) -> str:
    """``broker/log/segment.py``, ``kio/schema/...`` or ``<stdlib> asyncio/events.py`` for a
    full path; names that are not absolute paths (``<string>``, ``<frozen ...>``, or already
    shortened by py-spy) are kept."""
    if not filename.startswith("/"):
        return filename
    if m := _SITE.fullmatch(filename):
        return m["rest"]
    root = f"{ROOT}/"
    if filename.startswith(root):
        return filename[len(root) :]
    if m := _STDLIB.fullmatch(filename):
        return f"<stdlib> {m['rest']}"
    # Elsewhere (another checkout, say): the path from the outermost package, as py-spy does.
    path = Path(filename)
    top = path.parent
    while (top / "__init__.py").exists() and top.parent != top:
        top = top.parent
    if top != path.parent:
        return str(path.relative_to(top))
    return "/".join(path.parts[-2:])


def frame_label(frame: str) -> tuple[str, str]:
    """(``file:function``, file) for one py-spy frame ``function (file:line)``."""
    m = _FRAME.fullmatch(frame)
    if m is None:
        return frame, frame
    file = m["file"]
    if n := _LINENO.fullmatch(file):
        file = n["file"]
    file = short_path(file)
    return f"{file}:{m['func']}", file


def _rows(counts: Counter[str], total: int, top: int) -> tuple[Row, ...]:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return tuple(Row(label, n, n / total if total else 0.0) for label, n in ranked)


def summarize(raw: Path, top: int = 10) -> Profile:
    """Self, inclusive and per-file self samples of a py-spy raw profile, ``top`` of each."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    labels: dict[str, tuple[str, str]] = {}
    total = 0
    with raw.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip("\r\n").rpartition(" ")
            if not count.isdigit():
                continue
            samples = int(count)
            total += samples
            seen: set[str] = set()
            leaf: tuple[str, str] | None = None
            for frame in stack.split(";"):
                if not frame or _HEADER.fullmatch(frame):
                    continue
                if frame not in labels:
                    labels[frame] = frame_label(frame)
                leaf = labels[frame]
                seen.add(leaf[0])
            if leaf is None:
                self_time[NO_FRAME] += samples
                by_file[NO_FRAME] += samples
                continue
            self_time[leaf[0]] += samples
            by_file[leaf[1]] += samples
            for label in seen:
                inclusive[label] += samples
    return Profile(
        total=total,
        self_time=_rows(self_time, total, top),
        inclusive=_rows(inclusive, total, top),
        by_file=_rows(by_file, total, top),
    )


def render(profile: Profile) -> str:
    """The three tables of a profile as Markdown."""
    parts = [f"{profile.total:,} samples"]
    for title, rows in (
        ("Self time (running in the function itself)", profile.self_time),
        ("Inclusive time (the function or what it called)", profile.inclusive),
        ("Self time by file", profile.by_file),
    ):
        lines = [f"**{title}**", "", "| | samples | share |", "|---|---:|---:|"]
        lines += [f"| `{r.label}` | {r.samples:,} | {r.share:.1%} |" for r in rows]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
