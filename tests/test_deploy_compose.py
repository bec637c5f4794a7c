"""Compose files, validated and resolved by a real docker-compose: GPUs, health, discovery, CLI flags.

A role may run as several services (the four-GPU files give each talker and vocoder a service of its
own, so each gets its own GPU): a service's role is its command's first word."""
from __future__ import annotations

import pytest

from service_common.memory_sizing import MAX_AUTO_SLOTS, SOLO_FRACTION
from test_deploy_support import (COMPOSE_FILES, SERVICE_ROLES, assert_cli_accepts, assert_env_keys_are_flags,
                                 cli_flags, compose_config, parse_flags, role_modules, split_endpoint)

# GPU id -> the roles of the processes on it (one entry per replica), per file
GPU_LAYOUTS = {
    "single": {"0": ["talker", "vocoder"]},
    "multi": {"0": ["talker"], "1": ["vocoder", "vocoder"]},
    "four": {"0": ["talker"], "1": ["talker"], "2": ["vocoder"], "3": ["vocoder"]},
    "four-shared": {str(gpu): ["talker", "vocoder"] for gpu in range(4)},
}


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


def of_role(cfg: dict, role: str) -> dict[str, dict]:
    """The services running `role`, by name."""
    return {name: s for name, s in cfg["services"].items() if s["command"][0] == role}


def replicas(service: dict) -> int:
    return int(service.get("deploy", {}).get("replicas", 1))


def test_services_are_the_three_roles(config):
    _, cfg = config
    assert {s["command"][0] for s in cfg["services"].values()} == set(SERVICE_ROLES)
    assert list(of_role(cfg, "gateway")) == ["gateway"]
    for name, service in cfg["services"].items():
        role = service["command"][0]
        assert name == role or name.startswith(role + "-"), f"service {name} runs role {role}"
        assert service["image"] == cfg["services"]["gateway"]["image"], "one image for every role"


def test_gpu_reservations_on_talker_and_vocoder_only(config):
    """Each file puts its processes on the GPUs it says (compose cannot give one service's replicas
    different GPUs, so a process with a GPU of its own is a service of its own)."""
    name, cfg = config
    assert gpu_ids(cfg["services"]["gateway"]) is None
    layout: dict[str, list[str]] = {}
    for service in cfg["services"].values():
        role = service["command"][0]
        if role == "gateway":
            continue
        (gpu,) = gpu_ids(service)
        layout.setdefault(gpu, []).extend([role] * replicas(service))
        assert flags(service)["--device"].startswith("cuda")
    assert {gpu: sorted(roles) for gpu, roles in layout.items()} == GPU_LAYOUTS[name]


def test_gpu_assignment_follows_the_environment():
    services = compose_config("multi", {"QWEN3_TTS_TALKER_GPU": "2", "QWEN3_TTS_VOCODER_GPU": "3"})["services"]
    assert gpu_ids(services["talker"]) == ["2"] and gpu_ids(services["vocoder"]) == ["3"]
    services = compose_config("four", {"QWEN3_TTS_TALKER_A_GPU": "4", "QWEN3_TTS_TALKER_B_GPU": "5",
                                       "QWEN3_TTS_VOCODER_A_GPU": "6", "QWEN3_TTS_VOCODER_B_GPU": "7"})["services"]
    assert [gpu_ids(services[n]) for n in ("talker-a", "talker-b", "vocoder-a", "vocoder-b")] == [
        ["4"], ["5"], ["6"], ["7"]]
    services = compose_config("four-shared", {"QWEN3_TTS_GPU_C": "6"})["services"]
    assert gpu_ids(services["talker-c"]) == gpu_ids(services["vocoder-c"]) == ["6"]


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
        for name, service in of_role(cfg, role).items():
            assert "ports" not in service, f"{name} is internal; publishing breaks replicas"


def test_peers_are_found_by_service_name(config):
    """Each talker lists every vocoder service, the gateway every talker service, by name (a name
    with replicas resolves to all of them), on the port the peer binds."""
    _, cfg = config
    services = cfg["services"]
    for role, flag, peer in (("talker", "--vocoders", "vocoder"), ("gateway", "--talkers", "talker")):
        for name, service in of_role(cfg, role).items():
            endpoints = [split_endpoint(e) for e in flags(service)[flag].split(",")]
            assert sorted(host for host, _ in endpoints) == sorted(of_role(cfg, peer)), f"{name} {flag}"
            for host, port in endpoints:
                assert port == split_endpoint(flags(services[host])["--bind"].replace("0.0.0.0", host))[1]
    gateway = flags(services["gateway"])
    advertised, bound = split_endpoint(gateway["--audio-advertise"]), split_endpoint(gateway["--audio-bind"])
    assert advertised == ("gateway", bound[1])


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_compose_commands_match_the_service_cli(role):
    for name in sorted(COMPOSE_FILES):
        for service_name, service in of_role(compose_config(name), role).items():
            args = service["command"][1:]
            unknown = set(parse_flags(args)) - cli_flags(role)
            assert not unknown, f"{name}: compose passes {sorted(unknown)} to {service_name}, whose CLI has no such flags"
            environ = {k: v for k, v in service.get("environment", {}).items() if k.startswith("QWEN3_TTS_")}
            assert_env_keys_are_flags(role, environ)
            assert_cli_accepts(role, args, environ)


def test_side_ports_bind_every_interface_explicitly(config):
    # The services default their admin gRPC and metrics ports to loopback; inside a container the
    # healthcheck and peers need them on the container's interface, so the files must say so.
    _, cfg = config
    for role in ("talker", "vocoder"):
        for name, service in of_role(cfg, role).items():
            assert flags(service).get("--grpc-host") == "0.0.0.0", name
    for name, service in cfg["services"].items():
        assert flags(service).get("--metrics-host") == "0.0.0.0", name


def test_every_process_serves_prometheus_metrics_on_a_port_of_its_role(config):
    """Talkers and vocoders are off by default (-1); the files turn their endpoints on, one port per
    role (the vocoders' carries the busy ratio the Helm chart's HPA reads), not published."""
    _, cfg = config
    for role in SERVICE_ROLES:
        ports = {int(flags(service).get("--metrics-port", -1)) for service in of_role(cfg, role).values()}
        assert len(ports) == 1 and min(ports) > 0, f"{role}: {ports}"


def max_slots(service: dict, role: str) -> int:
    """The most streams a process takes: its setting, or auto's ceiling (MAX_AUTO_SLOTS on CUDA)."""
    return int((service.get("environment") or {}).get(f"QWEN3_TTS_{role.upper()}_MAX_SLOTS", 0)) or MAX_AUTO_SLOTS


def test_the_vocoders_left_after_one_is_lost_carry_every_stream_the_talkers_admit(config):
    """A vocoder refuses streams beyond its slots (RESOURCE_EXHAUSTED to the caller). With fewer slots
    than the talker, the multi-GPU file's 2 x 128 refused streams at 256 (the talker's split is only
    roughly even), and a lone survivor of a replica kill could hold only half the talker's streams.
    So: every vocoder takes at least one talker's streams, and with one vocoder lost the others hold
    all the talkers' streams."""
    _, cfg = config
    talkers = [max_slots(s, "talker") for s in of_role(cfg, "talker").values() for _ in range(replicas(s))]
    vocoders = [max_slots(s, "vocoder") for s in of_role(cfg, "vocoder").values() for _ in range(replicas(s))]
    assert min(vocoders) >= max(talkers)
    survivors = sum(sorted(vocoders)[:-1]) if len(vocoders) > 1 else vocoders[0]
    assert survivors >= sum(talkers), (vocoders, talkers)


def test_gateway_admits_what_its_talkers_can_hold(config):
    """The gateway refuses calls beyond --max-streams (default 256): it must let through what the
    talkers hold together (slots + queue, auto max(64, slots)), as the local launcher sets it, or it,
    not they, caps the stack (the default would refuse half of a 512-stream level on two GPUs)."""
    _, cfg = config
    talkers = [max_slots(s, "talker") for s in of_role(cfg, "talker").values() for _ in range(replicas(s))]
    limit = int(flags(cfg["services"]["gateway"]).get("--max-streams", 256))
    assert limit >= sum(slots + max(64, slots) for slots in talkers), (limit, talkers)


def test_four_gpu_processes_are_sized_from_their_gpu():
    """No fixed slot counts or graph pools where every process knows its GPU share: the talker's
    slots and the vocoder's graph pool follow the card's memory; the shares on one GPU fit in 0.9."""
    for name in ("four", "four-shared"):
        cfg = compose_config(name)
        per_gpu: dict[str, float] = {}
        for service_name, service in cfg["services"].items():
            role = service["command"][0]
            if role == "gateway":
                continue
            env = service.get("environment") or {}
            prefix = f"QWEN3_TTS_{role.upper()}_"
            assert f"{prefix}GRAPH_MEMORY_BUDGET_MB" not in env, service_name
            if role == "talker":
                assert f"{prefix}MAX_SLOTS" not in env and f"{prefix}MAX_QUEUED" not in env, service_name
            (gpu,) = gpu_ids(service)
            per_gpu[gpu] = per_gpu.get(gpu, 0.0) + float(env[f"{prefix}GPU_MEMORY_FRACTION"])
        assert all(0 < total <= SOLO_FRACTION + 1e-9 for total in per_gpu.values()), (name, per_gpu)


def test_vocoders_sharing_a_gpu_have_fixed_graph_pools_that_fit_it_together():
    """Multi-GPU file: replicas on one GPU each get a fixed graph budget. Sized from a share of the GPU
    instead, the first replica's capture overshot its share (55.6 GB reserved for all 54 graphs on an
    H100 against a 33.7 GiB budget: the check runs before each shape), leaving the second too little."""
    vocoder = compose_config("multi")["services"]["vocoder"]
    budget_mb = float(vocoder["environment"]["QWEN3_TTS_VOCODER_GRAPH_MEMORY_BUDGET_MB"])
    assert 0 < vocoder["deploy"]["replicas"] * budget_mb <= 40 * 1024   # well inside an 80 GB card with weights
