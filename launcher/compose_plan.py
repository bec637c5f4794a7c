"""Read a compose file of this project into the processes that would run on one host without Docker.

Machines with GPUs but no Docker engine (a lent benchmark host, a bare-metal node) should start
the services with the very commands and environment the compose file gives its containers. What
a container engine provides is stood in for, and nothing else is changed:

- each replica gets its own loopback address (127.0.<service>.<replica>), standing in for the
  container's own network namespace: `0.0.0.0` and `127.0.0.1` in its flags become that address,
  and its `--grpc-host` is set there, so replicas never share a port;
- a peer given by service name (`tcp://vocoder:5701`) becomes the list of that service's replica
  addresses, which is what the compose DNS name resolves to;
- GPU reservations become CUDA_VISIBLE_DEVICES; named volumes become folders under the work dir
  (flag values under a mount target are moved there);
- `${VAR}` / `${VAR:-default}` are substituted from the environment as docker-compose does;
- a service's `restart` policy is kept on its replicas: compose_run starts a replica that died
  again, on the same addresses, unless the policy is "no".

The plan is data only (no processes): `launcher.compose_run` starts it, tests inspect it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# The image's entry point (deploy/docker/entrypoint.sh) maps each role to one module.
ROLE_MODULES = {"gateway": "gateway", "talker": "talker_service", "vocoder": "vocoder_service"}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")
_PEER = re.compile(r"tcp://([A-Za-z0-9_.-]+):(\d+)")
_WILDCARD_HOSTS = ("0.0.0.0", "127.0.0.1")
RESTART_POLICIES = ("no", "always", "unless-stopped", "on-failure")


@dataclass
class ReplicaPlan:
    name: str                     # "vocoder-1"
    service: str                  # "vocoder"
    role: str                     # entry-point role: gateway | talker | vocoder
    module: str                   # python -m <module>
    args: list[str]               # the role's flags, rewritten for this host
    env: dict[str, str]           # added to the runner's own environment
    address: str                  # this replica's loopback address
    health_target: str            # HOST:PORT the compose health check asks
    stop_grace_s: float = 10.0
    restart: str = "no"           # compose `restart`: "no" | "always" | "unless-stopped" | "on-failure"

    @property
    def restarts(self) -> bool:
        """Whether a container engine would start this replica again after it died ("on-failure"
        counts as yes: the roles exit 0 only when told to stop, and a stop ends the run anyway)."""
        return self.restart != "no"


@dataclass
class ComposePlan:
    replicas: list[ReplicaPlan] = field(default_factory=list)

    def of(self, service: str) -> list[ReplicaPlan]:
        return [r for r in self.replicas if r.service == service]


def substitute(text: str, environ: dict[str, str]) -> str:
    """docker-compose's `${VAR}`, `${VAR-default}` and `${VAR:-default}` (no other forms are used here)."""
    def one(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        value = environ.get(name)
        if value is None or (value == "" and ":-" in match.group(0)):
            return default if default is not None else ""
        return value
    return _VARIABLE.sub(one, text)


def load_plan(compose_file: str | Path, work_dir: str | Path, environ: dict[str, str] | None = None,
              flag_overrides: dict[str, str] | None = None) -> ComposePlan:
    """The replicas of `compose_file`, in start order (a service after those it depends on).

    `flag_overrides` {"device": "cpu"} replaces the value of `--device=...` wherever a command has
    it: for a smoke run of a GPU compose file on a machine without GPUs. Flags a command lacks are
    not added (the roles' QWEN3_TTS_<ROLE>_* environment covers those).
    """
    environ = dict(os.environ if environ is None else environ)
    document = yaml.safe_load(substitute(Path(compose_file).read_text(), environ))
    services: dict[str, dict] = document.get("services") or {}
    if not services:
        raise ValueError(f"{compose_file}: no services")
    order = _start_order(services)
    addresses = {name: [f"127.0.{index + 1}.{replica + 1}" for replica in range(_replicas(services[name]))]
                 for index, name in enumerate(order)}
    plan = ComposePlan()
    for name in order:
        service = services[name]
        role, *flags = [str(part) for part in service.get("command") or []]
        if role not in ROLE_MODULES:
            raise ValueError(f"{compose_file}: service {name!r} runs role {role!r}; expected one of "
                             f"{sorted(ROLE_MODULES)}")
        mounts = _mounts(service, Path(work_dir))
        for replica, address in enumerate(addresses[name]):
            args = [_rewrite(flag, address, addresses, mounts) for flag in flags]
            if not _has_flag(args, "grpc-host"):   # every role has --grpc-host
                args.append(f"--grpc-host={address}")
            for flag, value in (flag_overrides or {}).items():
                args = [f"--{flag}={value}" if a.startswith(f"--{flag}=") else a for a in args]
            plan.replicas.append(ReplicaPlan(
                name=f"{name}-{replica + 1}", service=name, role=role, module=ROLE_MODULES[role], args=args,
                env=_environment(service), address=address,
                health_target=_health_target(service, address), stop_grace_s=_seconds(service.get("stop_grace_period")),
                restart=_restart_policy(service, name)))
    return plan


def _start_order(services: dict[str, dict]) -> list[str]:
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in path:
            raise ValueError(f"depends_on cycle: {' -> '.join(path + (name,))}")
        if name not in services:
            raise ValueError(f"service {path[-1]!r} depends on unknown service {name!r}")
        depends = services[name].get("depends_on") or []
        for other in (depends if isinstance(depends, list) else list(depends)):
            visit(other, path + (name,))
        order.append(name)

    for name in services:
        visit(name, ())
    return order


def _replicas(service: dict) -> int:
    return int((service.get("deploy") or {}).get("replicas", 1))


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):   # ["KEY=value", ...]
        env = dict(item.split("=", 1) for item in env)
    out = {str(k): "" if v is None else str(v) for k, v in env.items()}
    devices = (((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices")
    for device in devices or []:
        if "gpu" in (device.get("capabilities") or []) and device.get("device_ids"):
            out["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in device["device_ids"])
    return out


def _mounts(service: dict, work_dir: Path) -> dict[str, Path]:
    """Mount target -> host folder, for named volumes ("voices:/data/voices")."""
    mounts = {}
    for volume in service.get("volumes") or []:
        source, _, target = str(volume).partition(":")
        if target and not source.startswith(("/", ".")):
            mounts[target.split(":")[0]] = work_dir / "volumes" / source
    return mounts


def _rewrite(flag: str, address: str, addresses: dict[str, list[str]], mounts: dict[str, Path]) -> str:
    name, eq, value = flag.partition("=")
    if not eq:
        return flag
    if name.endswith("-host") and value in _WILDCARD_HOSTS:
        return f"{name}={address}"   # --grpc-host=0.0.0.0 / --metrics-host=0.0.0.0 bind in the replica's own netns
    for wildcard in _WILDCARD_HOSTS:
        value = value.replace(f"//{wildcard}:", f"//{address}:")

    def peers(match: re.Match) -> str:
        host, port = match.group(1), match.group(2)
        if host not in addresses:
            return match.group(0)
        return ",".join(f"tcp://{peer}:{port}" for peer in addresses[host])

    value = _PEER.sub(peers, value)
    for target, folder in mounts.items():
        if value == target or value.startswith(target + "/"):
            value = str(folder) + value[len(target):]
    return f"{name}={value}"


def _restart_policy(service: dict, name: str) -> str:
    # YAML reads a bare `no` as False; compose spells it "no"
    policy = service.get("restart", "no")
    policy = "no" if policy is False else str(policy)
    if policy.split(":")[0] not in RESTART_POLICIES:   # "on-failure:3" carries a retry count
        raise ValueError(f"service {name!r}: restart policy {policy!r} is none of {sorted(RESTART_POLICIES)}")
    return policy


def _has_flag(args: list[str], flag: str) -> bool:
    return any(a == f"--{flag}" or a.startswith(f"--{flag}=") for a in args)


def _health_target(service: dict, address: str) -> str:
    test = [str(part) for part in (service.get("healthcheck") or {}).get("test") or []]
    if "healthcheck" not in test or test.index("healthcheck") + 1 >= len(test):
        raise ValueError(f"service health check {test} does not run `qwen3-tts healthcheck HOST:PORT`")
    host, _, port = test[test.index("healthcheck") + 1].rpartition(":")
    return f"{address if host in _WILDCARD_HOSTS else host}:{port}"


def _seconds(duration) -> float:
    """Compose durations as used here: "30s", "2m", "1m30s", or a number of seconds."""
    if duration is None:
        return 10.0
    if isinstance(duration, (int, float)):
        return float(duration)
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(duration).strip())
    if not parts or not any(parts.groups()):
        raise ValueError(f"unsupported duration {duration!r}")
    return 60.0 * int(parts.group(1) or 0) + int(parts.group(2) or 0)
