"""Start-up failures an operator must fix (a taken port, a model that does not exist).

Each is one line on stderr and exit status EXIT_STARTUP_ERROR, never a traceback: the line is the
whole story. The launcher stops at once with that line when a child fails so on its first start
(nothing was ever ready, and the same arguments would fail the same way). A child that fails so
on a restart had been serving; it is retried with backoff like any other death, since its
pinned port may be held only briefly, and a lasting failure ends as a crash loop.
"""
from __future__ import annotations

import errno
import logging
import socket
import sys
from collections.abc import Callable

from checkpoint.errors import CheckpointError

logger = logging.getLogger(__name__)

# argparse's status for a usage error: both mean "these arguments cannot work".
EXIT_STARTUP_ERROR = 2

# gRPC servers of this project bind exclusively: with SO_REUSEPORT (gRPC's default on Linux) a
# second process on a taken port starts fine and the kernel silently splits connections.
GRPC_SERVER_OPTIONS = (("grpc.so_reuseport", 0),)


class StartupError(Exception):
    """The message is the one line shown to the operator; it names what to fix."""


# Raised by code that knows nothing of this module, yet at start-up they only mean bad arguments.
_STARTUP_ERROR_TYPES = (StartupError, CheckpointError)


def run_main(prog: str, main: Callable[[], int]) -> int:
    """`main()`, with a start-up failure turned into `<prog>: error: <message>` and EXIT_STARTUP_ERROR."""
    try:
        return main()
    except _STARTUP_ERROR_TYPES as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_STARTUP_ERROR


def startup_error_line(returncode: int | None, read_log: Callable[[], str]) -> str | None:
    """A child's one-line start-up error when it exited with EXIT_STARTUP_ERROR, else None."""
    if returncode != EXIT_STARTUP_ERROR:
        return None
    lines = [line.strip() for line in read_log().splitlines() if ": error: " in line]
    return lines[-1] if lines else f"exited with {EXIT_STARTUP_ERROR} (start-up error)"


def check_tcp_port_free(host: str, port: int, what: str) -> None:
    """StartupError when something already listens on host:port (port 0 always passes).

    Checked with a plain socket before gRPC binds, because gRPC reports the same failure as a
    multi-line core log plus a RuntimeError that tells the operator nothing.
    """
    if port == 0:
        return
    bare_host = host.strip("[]") or None
    try:
        addresses = socket.getaddrinfo(bare_host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"{what} {host}:{port}: cannot resolve {host!r}: {exc.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # as gRPC does: a port held only by TIME_WAIT connections is free to listen on
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise StartupError(f"{what} {host}:{port} could not be bound: it is in use by another process") from None
                logger.debug("probe bind %s: %s (left to gRPC to report)", address, exc)


def grpc_server_options(reuse_port: bool = False) -> list[tuple[str, int]]:
    """GRPC_SERVER_OPTIONS, or with SO_REUSEPORT on for processes meant to share a port."""
    return [("grpc.so_reuseport", 1)] if reuse_port else list(GRPC_SERVER_OPTIONS)


def add_grpc_port(server, host: str, port: int, what: str, reuse_port: bool = False) -> int:
    """`server.add_insecure_port`, with a failure to bind as a StartupError; returns the bound port.
    `reuse_port`: the server shares the port on purpose (grpc_server_options(True)): no taken-port check."""
    if not reuse_port:
        check_tcp_port_free(host, port, what)
    address = f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:   # newer grpcio raises where older ones returned 0
        raise StartupError(f"{what} {address} could not be bound: {exc}") from None
    if bound == 0:
        raise StartupError(f"{what} {address} could not be bound")
    return bound


def bind_zmq(sock, endpoint: str, what: str) -> None:
    """`sock.bind(endpoint)`, with a ZeroMQ failure (address in use, bad interface) as a StartupError."""
    import zmq

    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        raise StartupError(f"{what} {endpoint} could not be bound: {exc.strerror}") from None
