"""A small disk for storage-fault tests: a tmpfs mounted on a directory for the duration of a
``with`` block, and a filler file that leaves only a given amount of free space on it.

``mounted_tmpfs`` needs root (``mount -t tmpfs``); without it the test is skipped. It always
unmounts on the way out, also when the test fails (lazily, ``umount -l``, if a process still
holds a file there; the harness stops the brokers first, so that is only a fallback).

Concurrency: one test at a time per mount point (the mount point is in the test's own
temporary directory).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = "filler.bin"


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """Mount a ``size_bytes`` tmpfs on ``path`` (created if needed) for the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs on {path}: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        if _run("umount", str(path)).returncode != 0:
            lazy = _run("umount", "-l", str(path))
            if lazy.returncode != 0:
                sys.stderr.write(f"[tmpfs] could not unmount {path}: {lazy.stderr.strip()}\n")


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave_bytes: int) -> Path:
    """Create (or grow) ``path/filler.bin`` until about ``leave_bytes`` stay free on the
    file system of ``path``; returns the filler's path (delete it to free the space)."""
    filler = path / FILLER
    extra = free_bytes(path) - leave_bytes
    if extra > 0:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, os.fstat(fd).st_size, extra)
        finally:
            os.close(fd)
    return filler
