"""Peer endpoints from DNS: `tcp://name:port` stands for every address `name` resolves to.

A Kubernetes headless Service (or Docker's DNS for a scaled compose service) answers one record
per ready replica, so one configured endpoint becomes many peers, and the set changes as replicas
come and go. `PeerDirectory` resolves the configured list once at start (synchronously, so the
first connections happen at once) and then again every `interval_s` on a daemon thread: a slow or
failing DNS server must never stall a process's event loop. Its one consumer (the loop owning the
sockets) calls `take_changes` from its own thread and gets, only when the answer moved, which
endpoints to connect, which retired ones came back and which to retire.

What a failed lookup means: "no such name" (EAI_NONAME/EAI_NODATA: e.g. a headless Service with
no ready pod) is an empty answer, so those peers leave; any other failure (timeouts, EAI_AGAIN)
keeps the name's previous addresses, because dropping every peer on one DNS hiccup would drain a
healthy fleet. Endpoints that are not `tcp://host:port` (ipc://, inproc://) pass through as they are.
"""
from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

ResolveFn = Callable[[str, int], list[str]]   # (host, port) -> address strings, may repeat
_TCP = re.compile(r"^tcp://(\[[^\]]+\]|[^:\[\]/]+):(\d+)$")
_NO_SUCH_NAME = {getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)}


def system_resolve(host: str, port: int) -> list[str]:
    """IPv4 and IPv6 addresses of `host` (raises socket.gaierror)."""
    return [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def split_tcp(endpoint: str) -> tuple[str, int] | None:
    """(host, port) of a `tcp://host:port` or `tcp://[v6]:port` endpoint; None for anything else."""
    match = _TCP.match(endpoint.strip())
    if match is None:
        return None
    return match.group(1).strip("[]"), int(match.group(2))


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        return False


def address_endpoint(address: str, port: int) -> str:
    """A concrete ZeroMQ endpoint for one resolved address (IPv6 in brackets)."""
    return f"tcp://[{address}]:{port}" if ":" in address else f"tcp://{address}:{port}"


def is_ipv6_endpoint(endpoint: str) -> bool:
    """True for `tcp://[...]:port`: the connecting socket needs ZMQ_IPV6 set."""
    return endpoint.startswith("tcp://[")


def resolve_endpoint(endpoint: str, resolve: ResolveFn, previous: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The concrete endpoints one configured endpoint stands for now, in DNS order, no repeats."""
    parts = split_tcp(endpoint)
    if parts is None:
        return (endpoint,)
    host, port = parts
    if is_ip_literal(host):
        return (address_endpoint(host, port),)
    try:
        addresses = resolve(host, port)
    except socket.gaierror as exc:
        if exc.errno in _NO_SUCH_NAME:
            logger.info("%s: %s has no addresses now (%s)", endpoint, host, exc)
            return ()
        logger.warning("%s: resolving %s failed (%s); keeping its %d known peers", endpoint, host, exc,
                       len(previous))
        return previous
    except OSError as exc:
        logger.warning("%s: resolving %s failed (%s); keeping its %d known peers", endpoint, host, exc,
                       len(previous))
        return previous
    return tuple(dict.fromkeys(address_endpoint(address, port) for address in addresses))


@dataclass(frozen=True)
class PeerChanges:
    joined: tuple[str, ...]     # new endpoints: connect
    returned: tuple[str, ...]   # retired endpoints back in DNS: use again
    left: tuple[str, ...]       # endpoints gone from DNS: retire (no new work; close when idle)


def diff_peers(known: Mapping[str, bool], wanted: Sequence[str]) -> PeerChanges:
    """`known`: endpoint -> is_retired for the peers a consumer holds; `wanted`: the DNS answer."""
    return PeerChanges(joined=tuple(e for e in wanted if e not in known),
                       returned=tuple(e for e in wanted if known.get(e, False)),
                       left=tuple(e for e, is_retired in known.items() if not is_retired and e not in wanted))


class PeerDirectory:
    """The concrete peer endpoints behind a configured endpoint list, kept fresh from DNS."""

    def __init__(self, endpoints: Sequence[str], interval_s: float, resolve: ResolveFn = system_resolve) -> None:
        if interval_s <= 0:
            raise ValueError(f"resolve interval must be > 0 s, got {interval_s}")
        self.configured = tuple(dict.fromkeys(e.strip() for e in endpoints if e.strip()))
        self.interval_s = interval_s
        self.resolve = resolve
        self.version = 0                       # bumped whenever endpoints() changes
        self.taken_version = -1                # the version take_changes last handed out
        self._by_configured: dict[str, tuple[str, ...]] = {}
        self._endpoints: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refresh()

    @property
    def needs_dns(self) -> bool:
        """False when every endpoint is an IP literal or not tcp: nothing can ever change."""
        return any((parts := split_tcp(e)) is not None and not is_ip_literal(parts[0]) for e in self.configured)

    def endpoints(self) -> tuple[str, ...]:
        with self._lock:
            return self._endpoints

    def refresh(self) -> bool:
        """Resolve every configured endpoint now; True when the peer set changed."""
        by_configured = {e: resolve_endpoint(e, self.resolve, self._by_configured.get(e, ())) for e in self.configured}
        merged = tuple(dict.fromkeys(p for peers in by_configured.values() for p in peers))
        with self._lock:
            self._by_configured = by_configured
            if set(merged) == set(self._endpoints):
                return False
            joined = [p for p in merged if p not in self._endpoints]
            left = [p for p in self._endpoints if p not in merged]
            self._endpoints = merged
            self.version += 1
        if self.version > 1 or left:
            logger.info("peers changed: +%s -%s (now %d)", joined, left, len(merged))
        return True

    @property
    def has_news(self) -> bool:
        """Whether take_changes would return something (a cheap check for hot loops)."""
        return self.taken_version != self.version

    def take_changes(self, known: Mapping[str, bool]) -> PeerChanges | None:
        """What to do to `known` (endpoint -> is_retired) to follow DNS; None when DNS did not move
        since the last call (cheap enough for every turn of an event loop)."""
        if not self.has_news:
            return None
        with self._lock:
            self.taken_version, wanted = self.version, self._endpoints
        return diff_peers(known, wanted)

    def start(self) -> None:
        """Re-resolve every `interval_s` on a daemon thread (not started when no name needs DNS)."""
        if self._thread is not None or not self.needs_dns:
            return
        self._thread = threading.Thread(target=self._run, name="peer-directory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.refresh()
            except Exception:   # a resolver bug must not end discovery for the process's lifetime
                logger.exception("re-resolving %s failed", ",".join(self.configured))

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
