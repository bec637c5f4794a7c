"""Discovery units: endpoint parsing, one name -> many peers, failed lookups, the re-resolving
directory, and the talker's VocoderLinks following DNS (real DEALERs on loopback, fake resolver).

No real DNS: every resolver here is a dict lookup, so answers can change between calls.
"""
from __future__ import annotations

import socket
import time

import pytest
import zmq

from protos.tts.internal.v1 import common_pb2
from service_common.discovery import (PeerDirectory, address_endpoint, diff_peers, is_ipv6_endpoint,
                                      resolve_endpoint, split_tcp)
from talker_service.server.vocoders import VocoderLinks

pytestmark = pytest.mark.timeout(30)


class FakeDns:
    """name -> addresses; a missing name is NXDOMAIN, a name mapped to an exception raises it."""

    def __init__(self, table: dict) -> None:
        self.table = table
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        answer = self.table.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if isinstance(answer, Exception):
            raise answer
        return list(answer)


def test_split_and_format_endpoints():
    assert split_tcp("tcp://vocoders.ns.svc:5701") == ("vocoders.ns.svc", 5701)
    assert split_tcp("tcp://[::1]:5701") == ("::1", 5701)
    assert split_tcp("ipc:///tmp/x") is None and split_tcp("tcp://host:*") is None
    assert address_endpoint("10.0.0.7", 5701) == "tcp://10.0.0.7:5701"
    assert address_endpoint("fd00::7", 5701) == "tcp://[fd00::7]:5701"
    assert is_ipv6_endpoint("tcp://[fd00::7]:5701") and not is_ipv6_endpoint("tcp://10.0.0.7:5701")


def test_a_name_becomes_one_endpoint_per_address_ipv4_and_ipv6_without_repeats():
    dns = FakeDns({"vocoders.test": ["10.0.0.2", "fd00::2", "10.0.0.1", "10.0.0.2"]})
    got = resolve_endpoint("tcp://vocoders.test:5701", dns)
    assert got == ("tcp://10.0.0.2:5701", "tcp://[fd00::2]:5701", "tcp://10.0.0.1:5701")
    assert dns.calls == [("vocoders.test", 5701)]


def test_literals_and_non_tcp_endpoints_skip_dns():
    dns = FakeDns({})
    assert resolve_endpoint("tcp://127.0.0.2:5701", dns) == ("tcp://127.0.0.2:5701",)
    assert resolve_endpoint("tcp://[::1]:5701", dns) == ("tcp://[::1]:5701",)
    assert resolve_endpoint("ipc:///tmp/vocoder", dns) == ("ipc:///tmp/vocoder",)
    assert dns.calls == []
    assert not PeerDirectory(["tcp://127.0.0.1:1", "ipc:///tmp/v"], 0.1, dns).needs_dns


def test_no_such_name_is_empty_but_a_temporary_failure_keeps_the_known_peers():
    known = ("tcp://10.0.0.1:5701",)
    assert resolve_endpoint("tcp://gone.test:5701", FakeDns({}), known) == ()
    flaky = FakeDns({"flaky.test": socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")})
    assert resolve_endpoint("tcp://flaky.test:5701", flaky, known) == known
    assert resolve_endpoint("tcp://flaky.test:5701", FakeDns({"flaky.test": OSError("timed out")}), known) == known


def test_diff_peers_joins_returns_and_retires():
    changes = diff_peers({"a": False, "b": False, "c": True}, ["b", "c", "d"])
    assert (changes.joined, changes.returned, changes.left) == (("d",), ("c",), ("a",))


def test_directory_reports_changes_once_and_merges_configured_endpoints():
    dns = FakeDns({"v.test": ["10.0.0.1", "10.0.0.2"]})
    directory = PeerDirectory(["tcp://v.test:5701", "tcp://10.0.0.2:5701", "tcp://10.0.0.9:5701"], 5.0, dns)
    assert directory.endpoints() == ("tcp://10.0.0.1:5701", "tcp://10.0.0.2:5701", "tcp://10.0.0.9:5701")
    assert directory.has_news
    first = directory.take_changes({})
    assert first.joined == directory.endpoints() and not directory.has_news
    assert directory.take_changes({e: False for e in first.joined}) is None   # nothing moved since
    assert directory.refresh() is False and directory.take_changes({}) is None
    dns.table["v.test"] = ["10.0.0.3"]
    assert directory.refresh() is True
    changes = directory.take_changes({e: False for e in first.joined})
    assert changes.joined == ("tcp://10.0.0.3:5701",) and changes.left == ("tcp://10.0.0.1:5701",)


def test_directory_thread_picks_up_a_new_answer_within_its_interval():
    dns = FakeDns({"v.test": ["10.0.0.1"]})
    directory = PeerDirectory(["tcp://v.test:5701"], 0.05, dns)
    directory.start()
    try:
        dns.table["v.test"] = ["10.0.0.1", "10.0.0.2"]
        deadline = time.monotonic() + 5
        while len(directory.endpoints()) != 2:
            assert time.monotonic() < deadline, "the directory thread never re-resolved"
            time.sleep(0.01)
    finally:
        directory.stop()
    assert directory._thread is None
    with pytest.raises(ValueError, match="resolve interval"):
        PeerDirectory(["tcp://v.test:1"], 0, dns)


def free_port_on(*hosts: str) -> int:
    """A TCP port free on every one of `hosts` (127.0.0.x are all loopback on Linux)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = probe.getsockname()[1]
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no port free on all of {hosts}")


def beat(peer_id: str, num_slots: int = 4) -> common_pb2.Heartbeat:
    return common_pb2.Heartbeat(peer_id=peer_id, incarnation=1, load=common_pb2.Load(num_slots_total=num_slots))


def test_vocoder_links_one_dealer_per_address_follow_dns_and_retire_only_when_idle():
    port = free_port_on("127.0.0.1", "127.0.0.2")
    context = zmq.Context()
    routers = {}
    for host in ("127.0.0.1", "127.0.0.2"):
        routers[host] = context.socket(zmq.ROUTER)
        routers[host].setsockopt(zmq.LINGER, 0)
        routers[host].bind(f"tcp://{host}:{port}")
    dns = FakeDns({"vocoders.test": ["127.0.0.1", "127.0.0.2"]})
    poller = zmq.Poller()
    links = VocoderLinks(context, [f"tcp://vocoders.test:{port}"], snd_hwm=10, timeout_s=5.0, poller=poller,
                         resolve_interval_s=60.0, resolve=dns)
    try:
        a, b = links.links
        assert (a.endpoint, b.endpoint) == (f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.2:{port}")
        assert {s for s, _ in poller.sockets} == {a.socket, b.socket}
        # each DEALER is its own connection: each vocoder address hears from exactly one peer
        for link in (a, b):
            link.socket.send(link.endpoint.encode())
        for host, router in routers.items():
            assert router.poll(5000), f"nothing reached the vocoder at {host}"
            _identity, body = router.recv_multipart()
            assert body == f"tcp://{host}:{port}".encode()
        now_s = time.monotonic()
        links.heartbeat(a, beat("voc-a"), now_s)
        links.heartbeat(b, beat("voc-b", num_slots=8), now_s)
        assert links.num_healthy(now_s) == 2 and links.pick(now_s) is b

        b.streams.add("req-1")                       # b leaves DNS while it still decodes req-1
        dns.table["vocoders.test"] = ["127.0.0.1"]
        links.directory.refresh()
        links.refresh()
        assert b in links.links and b.is_retired and not b.is_healthy(now_s, 5.0)
        assert links.pick(now_s) is a and links.num_healthy(now_s) == 1
        b.streams.clear()                            # req-1 ended: the idle retired link closes
        links.refresh()
        assert links.links == [a] and b.socket.closed and {s for s, _ in poller.sockets} == {a.socket}

        dns.table["vocoders.test"] = ["127.0.0.2", "127.0.0.1"]   # it comes back: a fresh link
        links.directory.refresh()
        links.refresh()
        assert [link.endpoint for link in links.links] == [a.endpoint, b.endpoint]
        assert links.links[1] is not b and len(poller.sockets) == 2
    finally:
        links.close(linger_ms=0)
        for router in routers.values():
            router.close()
        context.term()
    assert links.links == [] and poller.sockets == []


def test_a_retired_vocoder_that_returns_before_closing_is_reused():
    context = zmq.Context()
    dns = FakeDns({"vocoders.test": ["127.0.0.1", "::1"]})
    links = VocoderLinks(context, ["tcp://vocoders.test:1"], 10, 5.0, poller=zmq.Poller(), resolve_interval_s=60.0,
                         resolve=dns)
    try:
        v4, v6 = links.links
        assert v6.endpoint == "tcp://[::1]:1" and v6.socket.getsockopt(zmq.IPV6) == 1
        v4.streams.add("req-1")
        dns.table["vocoders.test"] = ["::1"]
        links.directory.refresh()
        links.refresh()
        assert v4.is_retired
        dns.table["vocoders.test"] = ["::1", "127.0.0.1"]
        links.directory.refresh()
        links.refresh()
        assert links.links == [v4, v6] and not v4.is_retired
    finally:
        links.close(linger_ms=0)
        context.term()


def test_resolve_interval_is_a_flag_and_env_of_talker_and_gateway_and_must_be_positive():
    from gateway.config import GatewayConfig
    from gateway.main import config_from as gateway_config_from
    from talker_service.main import config_from as talker_config_from
    from talker_service.server.config import TalkerServiceConfig

    talker = talker_config_from(["--vocoders", "tcp://vocoders.test:5701", "--resolve-interval-s", "0.5"], {})
    assert talker.resolve_interval_s == 0.5 and talker.vocoder_endpoints() == ["tcp://vocoders.test:5701"]
    gateway = gateway_config_from([], {"QWEN3_TTS_GATEWAY_RESOLVE_INTERVAL_S": "2.5"})
    assert gateway.resolve_interval_s == 2.5
    with pytest.raises(ValueError, match="resolve_interval_s must be > 0"):
        TalkerServiceConfig(vocoders="tcp://vocoders.test:5701", resolve_interval_s=0)
    with pytest.raises(ValueError, match="resolve_interval_s must be > 0"):
        GatewayConfig(resolve_interval_s=-1)
