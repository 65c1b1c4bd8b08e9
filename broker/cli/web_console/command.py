"""``millrace console``: serve the web console of a cluster::

    millrace console --dir D | --bootstrap-server B [--command-config F]
        [--host 127.0.0.1] [--port 0] [--allow-writes] [--timeout S]
        [--sample-interval S] [--hanging-ms MS]

Reads the bootstrap servers, the client settings (``client_config``) and the brokers'
``metrics_url`` from ``D/cluster.json``, or connects to ``--bootstrap-server`` with
``--command-config``'s settings. Binds ``--host:--port`` (port 0: any free port), prints
``Millrace console on http://HOST:PORT/`` as one line on stdout (flushed) once the socket
listens, then serves (uvicorn) until Ctrl-C or SIGTERM, and stops its sampler thread.
Read-only unless ``--allow-writes``; bound to a loopback address (the default), it answers
only requests naming a loopback host (``127.0.0.1``, ``localhost``, ``[::1]``). A bad option
exits 2 with argparse's message naming it; a cluster directory without ``cluster.json`` exits
1 with one line.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

from broker.cli.common import CliError, add_connection_options, bootstrap_servers, guard

_PROG = "millrace console"
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_HANGING_MS = 15 * 60_000


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port is 0 to 65535")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "console",
        help="serve the web console of a cluster (read-only unless --allow-writes)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, default=0, help="port to bind (default 0: any free port)"
    )
    parser.add_argument(
        "--allow-writes",
        action="store_true",
        help="enable creating/deleting topics, changing configs, resetting offsets, aborting "
        "transactions",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time-out of each cluster request (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--sample-interval",
        type=_positive_float,
        default=5.0,
        metavar="SECONDS",
        help="how often throughput and lag are sampled for the plots (default 5)",
    )
    parser.add_argument(
        "--hanging-ms",
        type=_positive_int,
        default=DEFAULT_HANGING_MS,
        metavar="MS",
        help="an open transaction older than this is shown as hanging (default 900000)",
    )
    parser.set_defaults(func=guard(_PROG)(run))


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from broker.cli.web_console.app import Settings, build_app
    from broker.cli.web_console.cluster_source import ClusterSource, read_cluster_file
    from broker.cli.web_console.history import Sampler

    read_cluster_file(getattr(args, "dir", None))  # a missing cluster.json fails here
    source = ClusterSource(args, args.timeout)
    sampler = Sampler(source, args.sample_interval)
    app = build_app(
        source,
        sampler,
        Settings(args.allow_writes, args.hanging_ms, bootstrap_servers(args), args.host),
    )
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CliError(f"--host {args.host} --port {args.port}: cannot listen: {exc}") from exc
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    sampler.start()
    sys.stdout.write(f"Millrace console on http://{shown}:{port}/\n")
    sys.stdout.flush()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sampler.stop()
        sock.close()
    return 0
