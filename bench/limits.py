"""The machine's physical limits, measured in the benchmark run itself, so that a broker's
figures can be read against what the box could do at all.

What is measured, and how:

* Loopback TCP throughput (``loopback_throughput``): a child process (``sys.executable -c``,
  stdlib only) connects to 127.0.0.1 and ``sendall``\\s 1 MiB chunks as fast as it can for
  ``seconds``; this process ``recv_into``\\s a preallocated 1 MiB buffer and counts. The rate is
  measured at the receiver, from the first byte received to the sender's end of stream. Two
  processes, one connection, default socket buffers: what one client connection to a broker on
  the same machine could carry.
* Disk write throughput (``disk_write_throughput``), in a file in the given directory, of
  incompressible (random, non-zero) bytes written with ``os.write`` in 1 MiB blocks:

  - *buffered*: ``megabytes`` MiB with no sync until one ``os.fsync`` at the end, timed including
    that fsync; what a broker without per-message fsync sustains over a longer run;
  - *fdatasync*: ``fdatasync_megabytes`` MiB (256 by default) in 4 MiB writes, each followed by
    ``os.fdatasync``; what a broker that syncs each batch of about that size sustains.

  The files are deleted afterwards.

MB is 10**6 bytes throughout, as in the rest of ``bench``. Progress goes to stderr; the figures
are returned, never printed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
MB = 1_000_000

# The sender, run as ``python -c SENDER PORT SECONDS``: stdlib only, so it starts the same
# whichever module the benchmark was launched from.
_SENDER = """
import socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
chunk = bytes(range(1, 256)) * (1048576 // 255) + b"x" * (1048576 % 255)
sock = socket.create_connection(("127.0.0.1", port))
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    sock.sendall(chunk)
sock.shutdown(socket.SHUT_WR)
sock.close()
"""


@dataclass(frozen=True)
class DiskLimits:
    buffered_mb_s: float
    fdatasync_mb_s: float


@dataclass(frozen=True)
class Limits:
    loopback_mb_s: float
    disk_buffered_mb_s: float
    disk_fdatasync_mb_s: float


def _note(text: str) -> None:
    sys.stderr.write(f"limits: {text}\n")
    sys.stderr.flush()


def loopback_throughput(seconds: float = 3.0) -> float:
    """Bytes per second over one TCP connection on 127.0.0.1 between two processes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(30.0)
        port = server.getsockname()[1]
        child = subprocess.Popen([sys.executable, "-c", _SENDER, str(port), str(seconds)])
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(seconds + 30.0)
                buf = bytearray(MIB)
                view = memoryview(buf)
                n = conn.recv_into(view)
                start = time.perf_counter()
                received = 0
                while n:
                    n = conn.recv_into(view)
                    received += n
                elapsed = time.perf_counter() - start
        finally:
            try:
                child.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"loopback sender exited with {child.returncode}")
    if elapsed <= 0.0 or received == 0:
        raise RuntimeError("loopback sender sent nothing after its first chunk")
    return received / elapsed


def _write_all(fd: int, block: bytes) -> None:
    view = memoryview(block)
    while view:
        view = view[os.write(fd, view) :]


def _timed_write(path: Path, block: bytes, blocks: int, sync_each: bool) -> float:
    """Seconds to write ``blocks`` blocks to a new file at ``path``, including the syncs."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        start = time.perf_counter()
        for _ in range(blocks):
            _write_all(fd, block)
            if sync_each:
                os.fdatasync(fd)
        os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def disk_write_throughput(
    directory: Path, megabytes: int = 1024, fdatasync_megabytes: int = 256
) -> DiskLimits:
    """Sequential write throughput in ``directory``: buffered (one fsync at the end, ``megabytes``
    MiB in 1 MiB writes) and synced (``os.fdatasync`` after every 4 MiB write,
    ``fdatasync_megabytes`` MiB)."""
    directory.mkdir(parents=True, exist_ok=True)
    needed = max(megabytes, fdatasync_megabytes) * MIB
    free = shutil.disk_usage(directory).free
    if free < needed + needed // 10:
        raise OSError(
            f"{directory}: {free / MB:.0f} MB free, the disk test needs {needed / MB:.0f} MB"
        )
    # Random bytes: incompressible for filesystems that compress, and non-zero so nothing can
    # turn them into holes.
    block = os.urandom(MIB).replace(b"\0", b"\1")
    sync_block = block * 4
    fd, name = tempfile.mkstemp(prefix=".millrace-limits-", dir=directory)
    os.close(fd)
    path = Path(name)
    try:
        seconds = _timed_write(path, block, megabytes, sync_each=False)
        buffered = megabytes * MIB / seconds
        path.unlink()
        blocks = max(1, fdatasync_megabytes // 4)
        seconds = _timed_write(path, sync_block, blocks, sync_each=True)
        synced = blocks * 4 * MIB / seconds
    finally:
        path.unlink(missing_ok=True)
    return DiskLimits(buffered_mb_s=buffered / MB, fdatasync_mb_s=synced / MB)


def describe(directory: Path, megabytes: int = 1024) -> Limits:
    """Both measurements, loopback first; disk files go to ``directory``."""
    _note("loopback TCP throughput, 3 s ...")
    loopback = loopback_throughput() / MB
    _note(f"loopback TCP: {loopback:,.0f} MB/s")
    _note(f"disk write throughput in {directory} ({megabytes} MiB buffered, 256 MiB fdatasync) ...")
    disk = disk_write_throughput(directory, megabytes)
    _note(
        f"disk: {disk.buffered_mb_s:,.0f} MB/s buffered, "
        f"{disk.fdatasync_mb_s:,.0f} MB/s with fdatasync every 4 MiB"
    )
    return Limits(
        loopback_mb_s=loopback,
        disk_buffered_mb_s=disk.buffered_mb_s,
        disk_fdatasync_mb_s=disk.fdatasync_mb_s,
    )
