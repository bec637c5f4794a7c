"""The image recipe: CUDA PyTorch base, non-root, no weights, entry points that reach the real CLIs,
and the compose health check against a real gRPC health server."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from service_common.startup import GRPC_SERVER_OPTIONS
from test_deploy_support import DEPLOY, DOCKERFILE, ENTRYPOINT, REPO, SERVICE_ROLES, role_modules

HEALTHCHECK = DEPLOY / "healthcheck.py"
RUN_TIMEOUT_S = 60


def instructions() -> list[tuple[str, str]]:
    """(KEYWORD, argument) per Dockerfile instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (kw, _) in enumerate(steps) if kw == "FROM")
    return steps[last_from:]


def copy_destinations() -> dict[str, str]:
    """Source path -> destination of each COPY in the final stage (flags like --chmod dropped)."""
    out = {}
    for kw, arg in final_stage():
        if kw == "COPY":
            parts = [p for p in arg.split() if not p.startswith("--")]
            out.update({src: parts[-1] for src in parts[:-1]})
    return out


def run_entrypoint(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(["sh", str(ENTRYPOINT), *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=environ, cwd=REPO)


def test_base_is_cuda_pytorch_and_user_is_not_root():
    base_arg = next(arg for kw, arg in instructions() if kw == "ARG" and arg.startswith("BASE_IMAGE="))
    assert re.fullmatch(r"BASE_IMAGE=pytorch/pytorch:[\w.]+-cuda[\d.]+-cudnn\d+-runtime", base_arg), base_arg
    assert final_stage()[0] == ("FROM", "${BASE_IMAGE}")
    (user,) = [arg for kw, arg in final_stage() if kw == "USER"]
    assert user.split(":")[0] not in ("root", "0"), user
    # USER comes after every RUN: nothing runs as root at start, and the uid is numeric for runAsNonRoot
    assert [kw for kw, _ in final_stage()].index("USER") > max(i for i, (kw, _) in enumerate(final_stage()) if kw == "RUN")
    assert user.split(":")[0].isdigit()


def test_project_installed_and_no_weights_baked_in():
    runs = " ".join(arg for kw, arg in instructions() if kw == "RUN")
    assert "pip wheel" in runs and "pip install /tmp/wheels/*.whl" in runs
    for forbidden in ("snapshot_download", "huggingface-cli", "hf download", ".safetensors", "--model"):
        assert forbidden not in runs, f"the image build fetches weights ({forbidden!r})"
    ignored = {line.strip().rstrip("/") for line in (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in packages:
        top = pattern.rstrip("*")
        assert (REPO / top).is_dir(), f"pyproject includes {pattern} but {top}/ is missing"
        assert top not in ignored, f"{top}/ is excluded from the build context"
    assert "*.safetensors" in ignored
    env = " ".join(arg for kw, arg in final_stage() if kw == "ENV")
    assert "HF_HOME=/cache/" in env and "QWEN3_TTS_CACHE=/cache/" in env  # weights land in the volume
    assert any(kw == "VOLUME" and "/cache" in arg for kw, arg in final_stage())


def test_entrypoint_and_healthcheck_are_copied_where_referenced():
    copies = copy_destinations()
    (entry,) = [arg for kw, arg in final_stage() if kw == "ENTRYPOINT"]
    assert entry == f'["{copies["deploy/docker/entrypoint.sh"]}"]'
    assert copies["deploy/healthcheck.py"] == "/opt/qwen3-tts/healthcheck.py"
    assert "/opt/qwen3-tts/healthcheck.py" in ENTRYPOINT.read_text()
    (cmd,) = [arg for kw, arg in final_stage() if kw == "CMD"]
    assert cmd == '["gateway"]'


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_entrypoint_role_reaches_the_service_cli(role):
    done = run_entrypoint(role, "--help")
    assert done.returncode == 0, f"{role}: {done.stderr[-2000:]}"
    assert f"python -m {role_modules()[role]}" in done.stdout, done.stdout[:500]
    assert "--grpc-port" in done.stdout


def test_entrypoint_moves_an_unwritable_triton_cache_to_tmp(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("a read-only volume stands in here: nothing can be made under a file")
    done = run_entrypoint("vocoder", "--help", TRITON_CACHE_DIR=str(blocker / "triton"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cannot be written; Triton's kernel cache goes to /tmp/triton" in done.stderr
    writable = tmp_path / "cache" / "triton"
    done = run_entrypoint("vocoder", "--help", TRITON_CACHE_DIR=str(writable))
    assert done.returncode == 0 and "cannot be written" not in done.stderr and writable.is_dir()


def test_entrypoint_rejects_an_unknown_role():
    done = run_entrypoint("vocodr", "--help")
    assert done.returncode == 64 and "vocodr" in done.stderr


@pytest.fixture()
def health_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=GRPC_SERVER_OPTIONS)
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def healthcheck(target: str, *args: str) -> subprocess.CompletedProcess:
    return run_entrypoint("healthcheck", target, "--timeout-s", "2", *args, QWEN3_TTS_HEALTHCHECK=str(HEALTHCHECK))


def test_healthcheck_follows_the_serving_status(health_server):
    servicer, target = health_server
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)  # loading weights
    done = healthcheck(target)
    assert done.returncode == 1 and "NOT_SERVING" in done.stdout, done.stdout + done.stderr
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    done = healthcheck(target)
    assert done.returncode == 0 and "SERVING" in done.stdout, done.stdout + done.stderr
    done = healthcheck(target, "--service", "tts.v1.NoSuchService")
    assert done.returncode == 1 and "NOT_FOUND" in done.stdout


def test_healthcheck_fails_fast_when_nothing_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # a port that was free; nothing listens on it now
    started = time.monotonic()
    done = healthcheck(f"127.0.0.1:{port}")
    assert done.returncode == 1 and "DEADLINE_EXCEEDED" in done.stdout, done.stdout + done.stderr
    assert time.monotonic() - started < 2 + 10  # its own deadline, not compose's
