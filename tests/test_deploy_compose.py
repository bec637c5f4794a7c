"""Compose files, validated and resolved by a real docker-compose: GPUs, health, discovery, CLI flags."""
from __future__ import annotations

import pytest

from test_deploy_support import (COMPOSE_FILES, SERVICE_ROLES, assert_cli_accepts, assert_env_keys_are_flags,
                                 cli_flags, compose_config, parse_flags, role_modules, split_endpoint)


@pytest.fixture(scope="module", params=sorted(COMPOSE_FILES))
def config(request):
    return request.param, compose_config(request.param)


def gpu_ids(service: dict) -> list[str] | None:
    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
    if not devices:
        return None
    (device,) = devices
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], device
    return device["device_ids"]


def flags(service: dict) -> dict[str, str]:
    role, *args = service["command"]
    assert role in role_modules(), f"entry-point role {role!r} unknown to entrypoint.sh"
    return parse_flags(args)


def test_services_are_the_three_roles(config):
    _, cfg = config
    assert set(cfg["services"]) == set(SERVICE_ROLES)
    for name, service in cfg["services"].items():
        assert service["command"][0] == name
        assert service["image"] == cfg["services"]["gateway"]["image"], "one image for every role"


def test_gpu_reservations_on_talker_and_vocoder_only(config):
    name, cfg = config
    services = cfg["services"]
    assert gpu_ids(services["gateway"]) is None
    talker, vocoder = gpu_ids(services["talker"]), gpu_ids(services["vocoder"])
    assert talker and vocoder
    if name == "single":
        assert talker == vocoder == ["0"]
    else:
        assert not set(talker) & set(vocoder), f"talker {talker} and vocoder {vocoder} share a GPU"
        assert services["vocoder"]["deploy"]["replicas"] > 1
    for role in ("talker", "vocoder"):
        assert flags(services[role])["--device"].startswith("cuda")


def test_gpu_assignment_follows_the_environment():
    services = compose_config("multi", {"QWEN3_TTS_TALKER_GPU": "2", "QWEN3_TTS_VOCODER_GPU": "3"})["services"]
    assert gpu_ids(services["talker"]) == ["2"] and gpu_ids(services["vocoder"]) == ["3"]


def test_health_checks_restart_policy_and_volumes(config):
    _, cfg = config
    services = cfg["services"]
    for role, service in services.items():
        test = service["healthcheck"]["test"]
        assert test[:3] == ["CMD", "qwen3-tts", "healthcheck"], test
        host, port = test[3].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) == int(flags(service)["--grpc-port"]), f"{role}: {test}"
        assert service["restart"] in ("always", "unless-stopped")
        assert "model-cache:/cache:rw" in service["volumes"]
    voices_dir = flags(services["gateway"])["--voices-dir"]
    assert f"voices:{voices_dir}:rw" in services["gateway"]["volumes"]
    assert {"model-cache", "voices"} <= set(cfg["volumes"])


def test_gateway_publishes_grpc_http_and_metrics(config):
    _, cfg = config
    gateway = cfg["services"]["gateway"]
    targets = {p["target"] for p in gateway["ports"]}
    gateway_flags = flags(gateway)
    assert targets == {int(gateway_flags["--grpc-port"]), int(gateway_flags["--metrics-port"]),
                       int(gateway_flags["--http-port"])}
    for role in ("talker", "vocoder"):
        assert "ports" not in cfg["services"][role], f"{role} is internal; publishing breaks replicas"


def test_peers_are_found_by_service_name(config):
    _, cfg = config
    services = cfg["services"]
    for role, flag, peer in (("talker", "--vocoders", "vocoder"), ("gateway", "--talkers", "talker")):
        host, port = split_endpoint(flags(services[role])[flag])
        assert host == peer
        assert port == split_endpoint(flags(services[peer])["--bind"].replace("0.0.0.0", peer))[1]
    gateway = flags(services["gateway"])
    advertised, bound = split_endpoint(gateway["--audio-advertise"]), split_endpoint(gateway["--audio-bind"])
    assert advertised == ("gateway", bound[1])


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_compose_commands_match_the_service_cli(role):
    for name in sorted(COMPOSE_FILES):
        service = compose_config(name)["services"][role]
        args = service["command"][1:]
        unknown = set(parse_flags(args)) - cli_flags(role)
        assert not unknown, f"{name}: compose passes {sorted(unknown)} to {role}, whose CLI has no such flags"
        environ = {k: v for k, v in service.get("environment", {}).items() if k.startswith("QWEN3_TTS_")}
        assert_env_keys_are_flags(role, environ)
        assert_cli_accepts(role, args, environ)


def test_side_ports_bind_every_interface_explicitly(config):
    # The services default their admin gRPC and metrics ports to loopback; inside a container the
    # healthcheck and peers need them on the container's interface, so the files must say so.
    _, cfg = config
    for role in ("talker", "vocoder"):
        assert flags(cfg["services"][role]).get("--grpc-host") == "0.0.0.0", role
    gateway_flags = flags(cfg["services"]["gateway"])
    assert gateway_flags.get("--metrics-host") == "0.0.0.0"


def test_each_vocoder_replica_can_carry_every_stream_the_talker_admits(config):
    """A vocoder refuses streams beyond its slots (RESOURCE_EXHAUSTED to the caller). With fewer slots
    than the talker, the multi-GPU file's 2 x 128 refused streams at 256 (the talker's split is only
    roughly even), and a lone survivor of a replica kill could hold only half the talker's streams."""
    _, cfg = config
    env = {role: cfg["services"][role].get("environment") or {} for role in ("talker", "vocoder")}
    assert int(env["vocoder"]["QWEN3_TTS_VOCODER_MAX_SLOTS"]) >= int(env["talker"]["QWEN3_TTS_TALKER_MAX_SLOTS"])


def test_vocoders_sharing_a_gpu_have_fixed_graph_pools_that_fit_it_together():
    """Multi-GPU file: replicas on one GPU each get a fixed graph budget. Sized from a share of the GPU
    instead, the first replica's capture overshot its share (55.6 GB reserved for all 54 graphs on an
    H100 against a 33.7 GiB budget: the check runs before each shape), leaving the second too little."""
    vocoder = compose_config("multi")["services"]["vocoder"]
    budget_mb = float(vocoder["environment"]["QWEN3_TTS_VOCODER_GRAPH_MEMORY_BUDGET_MB"])
    assert 0 < vocoder["deploy"]["replicas"] * budget_mb <= 40 * 1024   # well inside an 80 GB card with weights
