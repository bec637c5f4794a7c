"""Compose files run on one host without Docker (launcher.compose_plan / compose_run): the plan keeps
every command and environment that the real docker-compose resolves, changing only what a container
engine would provide; a real run of the multi-GPU file (tiny, CPU) serves audio through both
vocoder replicas, survives a replica killed under load (benchmarks/replica_kill.py: the streams on
it fail UNAVAILABLE, new ones go to the survivor, the replica is restarted and takes work again)
and stops cleanly on SIGTERM; a real run of the four-GPU file spreads streams over both talkers and
survives a talker killed under load the same way (issue #38)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import grpc
import pytest

from async_support import run
from launcher.compose_plan import ROLE_MODULES, load_plan, substitute
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from test_deploy_support import COMPOSE_FILES, REPO, compose_config, parse_flags

pytestmark = pytest.mark.timeout(240)
ENV = {"QWEN3_TTS_MODEL": "Qwen/Qwen3-TTS-12Hz-0.6B-Base", "QWEN3_TTS_VOCODER_GPU": "3", "HF_TOKEN": "t0k"}
REWRITTEN = {"--bind", "--vocoders", "--talkers", "--audio-bind", "--audio-advertise", "--voices-dir", "--grpc-host",
             "--metrics-host"}


def test_substitution_follows_compose_rules():
    env = {"SET": "x", "EMPTY": ""}
    assert substitute("${SET} ${SET:-d} ${EMPTY:-d} ${EMPTY-d} ${MISSING-d} ${MISSING}", env) == "x x d  d "


@pytest.mark.parametrize("name", sorted(COMPOSE_FILES))
def test_plan_keeps_what_docker_compose_resolves(name, tmp_path):
    resolved = compose_config(name, ENV)["services"]
    plan = load_plan(COMPOSE_FILES[name], tmp_path, environ=ENV)
    assert {r.service for r in plan.replicas} == set(resolved)
    for replica in plan.replicas:
        service = resolved[replica.service]
        role, *compose_args = service["command"]
        assert (replica.role, replica.module) == (role, ROLE_MODULES[role])
        ours, theirs = parse_flags(replica.args), parse_flags(compose_args)
        assert {k: v for k, v in ours.items() if k not in REWRITTEN} == \
               {k: v for k, v in theirs.items() if k not in REWRITTEN}
        assert ours["--grpc-host"] == replica.address
        if "--metrics-host" in theirs:   # 0.0.0.0 in the container's netns = the replica's own address here
            assert ours["--metrics-host"] == replica.address
        for key, value in (service.get("environment") or {}).items():
            assert replica.env[key] == (value or "")
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
        assert replica.env.get("CUDA_VISIBLE_DEVICES") == (",".join(devices[0]["device_ids"]) if devices else None)
    started = [r.role for r in plan.replicas]   # every vocoder, then every talker, then the gateway
    assert started == sorted(started, key=["vocoder", "talker", "gateway"].index)


def test_restart_policy_is_kept_and_checked(tmp_path):
    plan = load_plan(COMPOSE_FILES["multi"], tmp_path, environ=ENV)
    assert {r.restart for r in plan.replicas} == {"unless-stopped"} and all(r.restarts for r in plan.replicas)
    text = COMPOSE_FILES["multi"].read_text()
    for policy, restarts in (("\"no\"", False), ("no", False), ("on-failure:3", True), ("always", True)):
        path = tmp_path / "policy.yml"
        path.write_text(text.replace("restart: unless-stopped", f"restart: {policy}"))
        assert {r.restarts for r in load_plan(path, tmp_path, environ=ENV).replicas} == {restarts}, policy
    path.write_text(text.replace("restart: unless-stopped", "restart: sometimes"))
    with pytest.raises(ValueError, match="restart policy 'sometimes'"):
        load_plan(path, tmp_path, environ=ENV)


def test_multi_gpu_plan_gives_each_replica_an_address_and_lists_them_as_peers(tmp_path):
    plan = load_plan(COMPOSE_FILES["multi"], tmp_path, environ=ENV, flag_overrides={"device": "cpu"})
    vocoders, (talker,), (gateway,) = plan.of("vocoder"), plan.of("talker"), plan.of("gateway")
    assert len(vocoders) == 2 and len({v.address for v in vocoders}) == 2
    assert {v.env["CUDA_VISIBLE_DEVICES"] for v in vocoders} == {"3"} and talker.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in gateway.env
    for v in vocoders:
        assert parse_flags(v.args)["--bind"] == f"tcp://{v.address}:5701"
        assert v.health_target == f"{v.address}:5711" and parse_flags(v.args)["--device"] == "cpu"
    assert parse_flags(talker.args)["--vocoders"] == ",".join(f"tcp://{v.address}:5701" for v in vocoders)
    flags = parse_flags(gateway.args)
    assert flags["--talkers"] == f"tcp://{talker.address}:5601"
    assert flags["--audio-advertise"] == flags["--audio-bind"] == f"tcp://{gateway.address}:5801"
    assert flags["--voices-dir"] == str(tmp_path / "volumes" / "voices")
    assert "--device" not in flags   # an override never adds a flag a command lacks
    assert gateway.health_target == f"{gateway.address}:50051" and gateway.stop_grace_s == 30.0


def test_four_gpu_plan_gives_each_talker_and_vocoder_its_own_gpu_and_lists_every_peer(tmp_path):
    plan = load_plan(COMPOSE_FILES["four"], tmp_path, environ={}, flag_overrides={"device": "cpu"})
    talkers, vocoders, (gateway,) = plan.of("talker-a") + plan.of("talker-b"), \
        plan.of("vocoder-a") + plan.of("vocoder-b"), plan.of("gateway")
    assert [r.env["CUDA_VISIBLE_DEVICES"] for r in talkers + vocoders] == ["0", "1", "2", "3"]
    assert len({r.address for r in plan.replicas}) == len(plan.replicas) == 5
    for talker in talkers:
        assert parse_flags(talker.args)["--vocoders"] == ",".join(f"tcp://{v.address}:5701" for v in vocoders)
        assert talker.env["QWEN3_TTS_TALKER_GPU_MEMORY_FRACTION"] == "0.9" and talker.restarts
    assert parse_flags(gateway.args)["--talkers"] == ",".join(f"tcp://{t.address}:5601" for t in talkers)
    shared = load_plan(COMPOSE_FILES["four-shared"], tmp_path, environ={})
    for x, gpu in zip("abcd", "0123"):
        (talker,), (vocoder,) = shared.of(f"talker-{x}"), shared.of(f"vocoder-{x}")
        assert talker.env["CUDA_VISIBLE_DEVICES"] == vocoder.env["CUDA_VISIBLE_DEVICES"] == gpu
        assert len(parse_flags(talker.args)["--vocoders"].split(",")) == 4
    assert len(parse_flags(shared.of("gateway")[0].args)["--talkers"].split(",")) == 4


def _finished(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        return admin_pb2_grpc.VocoderAdminStub(channel).GetStats(admin_pb2.GetStatsRequest(), timeout=5) \
            .requests.num_finished


def _talker_started(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        return admin_pb2_grpc.TalkerAdminStub(channel).GetStats(admin_pb2.GetStatsRequest(), timeout=5) \
            .requests.num_started


@contextlib.contextmanager
def compose_stack(name: str, tmp_path):
    """compose_run of COMPOSE_FILES[name] with the tiny checkpoint on CPU: (process, ready file, its
    contents) once every replica is SERVING; SIGTERM (then SIGKILL) in the end."""
    ready = tmp_path / "ready.json"
    # two gateway workers (the files' default is 4): the group starts, serves and stops as compose runs it
    env = dict(os.environ, QWEN3_TTS_MODEL="tiny", QWEN3_TTS_VOCODER_CPU_THREADS="1", QWEN3_TTS_TALKER_CPU_THREADS="1",
               QWEN3_TTS_GATEWAY_WORKERS="2", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "launcher.compose_run", str(COMPOSE_FILES[name]), "--set",
                             "device=cpu", "--work-dir", str(tmp_path / "work"), "--ready-file", str(ready),
                             "--health-timeout-s", "150"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 160
        while not ready.exists():
            assert proc.poll() is None, proc.stdout.read()[-4000:]
            assert time.monotonic() < deadline, "compose stack not ready in time"
            time.sleep(0.2)
        yield proc, ready, json.loads(ready.read_text())
    finally:
        if proc.poll() is None:   # SIGTERM first: compose_run stops its replicas (SIGKILL would orphan them)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def wait_healthy_talkers(gateway: dict, num_talkers: int, timeout_s: float = 30.0) -> None:
    """Until the gateway's `tts_healthy_talkers` gauge (its metrics port, 9090 in the compose files)
    counts `num_talkers`: it is SERVING once the first one is healthy."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(f"http://{gateway['address']}:9090/metrics", timeout=5) as reply:
            lines = reply.read().decode().splitlines()
        if f"tts_healthy_talkers {float(num_talkers)}" in lines:
            return
        assert time.monotonic() < deadline, [line for line in lines if line.startswith("tts_healthy_talkers")]
        time.sleep(0.1)


def synthesize_many(target: str, num_streams: int = 6) -> list:
    from client import TtsClient, make_config
    from protos.tts.v1 import config_pb2

    async def body():
        cfg = make_config("vivian", language="english", encoding=config_pb2.AUDIO_ENCODING_FLOAT32, seed=1,
                          max_frames=6, min_frames=6)
        async with TtsClient(target) as client:
            return await asyncio.gather(*(client.synthesize(f"Hello number {i}.", cfg, timeout_s=60)
                                          for i in range(num_streams)))

    replies = run(body(), 90)
    assert all(r.summary.num_frames == 6 and len(r.audio) > 0 for r in replies)
    return replies


def test_multi_gpu_file_runs_on_one_host_and_stops_on_sigterm(tmp_path):
    with compose_stack("multi", tmp_path) as (proc, ready, info):
        vocoders = [v["health"] for name, v in info["replicas"].items() if name.startswith("vocoder")]
        assert len(vocoders) == 2
        synthesize_many(info["grpc_target"])
        per_vocoder = [_finished(v) for v in vocoders]
        assert sum(per_vocoder) == 6 and min(per_vocoder) >= 1, per_vocoder   # least-loaded spreads them
        check_backend_metrics(info, per_vocoder)
        check_replica_kill(ready, tmp_path / "kill.json", info)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_four_gpu_file_spreads_streams_over_both_talkers_and_survives_one_killed(tmp_path):
    """SIGKILL talker-a under load: exactly the streams it held fail UNAVAILABLE naming it (the
    gateway sees its link close), the rest finish whole; the next streams all go to talker-b;
    compose_run restarts talker-a and the gateway gives it work again."""
    with compose_stack("four", tmp_path) as (proc, ready, info):
        talkers = {name: v["health"] for name, v in info["replicas"].items() if v["role"] == "talker"}
        assert sorted(talkers) == ["talker-a-1", "talker-b-1"]
        wait_healthy_talkers(info["replicas"]["gateway-1"], 2)
        synthesize_many(info["grpc_target"])
        per_talker = [_talker_started(t) for t in talkers.values()]
        assert sum(per_talker) == 6 and min(per_talker) >= 1, per_talker   # least-loaded spreads them

        result = kill_under_load(ready, tmp_path / "kill.json", "talker-a-1")
        restarted = json.loads(ready.read_text())["replicas"]["talker-a-1"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    at_kill = {t["talker"]: t for t in result["phases"]["during"]["talkers_at_kill"]}
    assert at_kill["talker-a-1"]["peer_id"].endswith(f":{info['replicas']['talker-a-1']['pid']}")
    on_victim, on_survivor = at_kill["talker-a-1"]["num_streams"], at_kill["talker-b-1"]["num_streams"]
    assert on_victim >= 1 and on_victim + on_survivor == 4, at_kill
    failed = assert_only_the_victims_streams_failed(result, info, "talker-a-1", "talker-b-1", on_victim)
    assert len(failed) == on_victim   # exactly: the gateway ends a dead talker's streams, no others
    assert_it_rejoined(result, info, restarted, "talker-a-1")


def kill_under_load(ready, out, victim: str) -> dict:
    """benchmarks/replica_kill.py: 4 streams of 8 s, `victim` SIGKILLed 1.5 s in, its restart awaited."""
    from benchmarks.replica_kill import main as replica_kill

    assert replica_kill(["--compose-ready", str(ready), "--kill", victim, "--streams", "4", "--frames", "100",
                         "--kill-after-s", "1.5", "--rejoin-timeout-s", "120", "--timeout-s", "120",
                         "--out", str(out)]) == 0
    return json.loads(out.read_text())


def assert_only_the_victims_streams_failed(result, info, victim: str, survivor: str, on_victim: int) -> list:
    """At least the streams on the victim fail, UNAVAILABLE naming it (role and pid); the rest finish
    whole; the next streams all go to the survivor. The failed rows."""
    role, victim_pid = info["replicas"][victim]["role"], str(info["replicas"][victim]["pid"])
    during = result["phases"]["during"]
    failed = [r for r in during["rows"] if r["code"] != "OK"]
    assert len(failed) >= on_victim and {r["code"] for r in failed} == {"UNAVAILABLE"}, during["outcome"]
    assert all(role in r["details"] and victim_pid in r["details"] for r in failed), during["outcome"]["messages"]
    assert all(r["audio_s"] == r["expected_audio_s"] for r in during["rows"] if r["code"] == "OK")
    after = result["phases"]["after"]
    split = after["load_split" if role == "vocoder" else "talker_load_split"]
    assert after["outcome"]["by_code"] == {"OK": 4} and after["outcome"]["num_full_length"] == 4
    # the victim may be listed (restarted, nothing served yet): every stream went to the survivor
    assert split[survivor]["streams"] == 4 and sum(s["streams"] for s in split.values()) == 4, split
    return failed


def assert_it_rejoined(result, info, restarted: dict, victim: str) -> None:
    """compose_run started the victim again (restart: unless-stopped) and it took some of the next streams."""
    assert result["kill_to_serving_again_s"] is not None
    # the rejoin phase waited for its peers to count it healthy (no fixed sleep), after it was SERVING
    assert result["kill_to_healthy_at_peers_s"] is not None
    assert result["kill_to_healthy_at_peers_s"] >= result["kill_to_serving_again_s"]
    assert restarted["num_starts"] == 2 and restarted["pid"] != info["replicas"][victim]["pid"]
    rejoin = result["phases"]["rejoin"]
    split = rejoin["load_split" if info["replicas"][victim]["role"] == "vocoder" else "talker_load_split"]
    assert rejoin["outcome"]["by_code"] == {"OK": 4} and split[victim]["streams"] >= 1, split


def check_backend_metrics(info: dict, finished_per_vocoder: list[int]) -> None:
    """Each vocoder replica's Prometheus port (the compose file's --metrics-port, on the replica's
    own address) counts the streams it finished and the decode time they took; the talker's too."""
    from metrics_support import scrape

    services = compose_config("multi")["services"]
    port = {role: int(parse_flags(services[role]["command"][1:])["--metrics-port"]) for role in ("vocoder", "talker")}
    replicas = info["replicas"]
    vocoders = [scrape(port["vocoder"], replicas[name]["address"]) for name in ("vocoder-1", "vocoder-2")]
    assert [v["qwen3_tts_vocoder_requests_completed_total"] for v in vocoders] == finished_per_vocoder
    assert all(v["qwen3_tts_vocoder_busy_seconds_total"] > 0 for v in vocoders)
    talker = scrape(port["talker"], replicas["talker-1"]["address"])
    assert talker["qwen3_tts_talker_requests_started_total"] == 6 and talker["qwen3_tts_talker_busy_seconds_total"] > 0


def check_replica_kill(ready, out, info):
    """SIGKILL vocoder-1 under load: what was on it fails UNAVAILABLE naming it, the rest finish whole;
    the next streams all go to vocoder-2; compose_run restarts vocoder-1 (restart: unless-stopped)
    and it serves again."""
    result = kill_under_load(ready, out, "vocoder-1")
    endpoint = "tcp://" + info["replicas"]["vocoder-1"]["address"] + ":5701"
    at_kill = result["phases"]["during"]["talker_view_at_kill"]
    on_victim = [v["num_streams"] for v in at_kill if v["endpoint"] == endpoint]
    assert on_victim and on_victim[0] >= 1, at_kill
    assert_only_the_victims_streams_failed(result, info, "vocoder-1", "vocoder-2", on_victim[0])
    assert_it_rejoined(result, info, json.loads(ready.read_text())["replicas"]["vocoder-1"], "vocoder-1")
