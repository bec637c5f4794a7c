"""The Helm chart, rendered and linted by a real Helm: GPUs, probes, Services, discovery, CLI flags."""
from __future__ import annotations

import pytest

from service_common.memory_sizing import MAX_AUTO_SLOTS
from test_deploy_support import (CHART, SERVICE_ROLES, assert_cli_accepts, assert_env_keys_are_flags,
                                 cli_flags, helm, parse_flags, render_chart, split_endpoint)

MULTI = str(CHART / "ci" / "multi-replica-values.yaml")
FOUR = str(CHART / "ci" / "four-gpu-values.yaml")
VALUES = {"default": (), "multi": ("-f", MULTI), "four": ("-f", FOUR)}
NAMESPACE = "speech"
GPU = "nvidia.com/gpu"
HEALTH_PORT_FLAG = "--grpc-port"  # every role serves grpc.health.v1 on its gRPC port


@pytest.fixture(scope="module", params=sorted(VALUES))
def rendered(request):
    return request.param, render_chart(*VALUES[request.param], namespace=NAMESPACE)


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def role_of(obj):
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def deployments_by_role(objects):
    return {role_of(d): d for d in by_kind(objects, "Deployment").values()}


def container(deployment):
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def container_ports(deployment):
    return {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}


def role_flags(deployment):
    args = container(deployment)["args"]
    assert args[0] == role_of(deployment), f"entry-point role {args[0]!r} in {deployment['metadata']['name']}"
    return parse_flags(args[1:])


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("name", sorted(VALUES))
def test_helm_lint_strict_passes(name):
    done = helm("lint", "--strict", str(CHART), *VALUES[name])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("bad", ["vocoder.replicaCount=-1", "talker.gpu=1", "gateway.ports.grpc=70000",
                                 "image.pullPolicy=Sometimes", "talker.gpus=0"])
def test_values_schema_rejects_bad_values(bad):
    done = helm("lint", "--strict", str(CHART), "--set", bad)
    assert done.returncode != 0, f"--set {bad} passed lint"
    assert "values don't meet the specifications of the schema" in done.stdout + done.stderr


def test_gpu_requests_on_talker_and_vocoder_only(rendered):
    _, objects = rendered
    deployments = deployments_by_role(objects)
    assert set(deployments) == set(SERVICE_ROLES)
    for role, dep in deployments.items():
        resources = container(dep).get("resources", {})
        gpus = resources.get("limits", {}).get(GPU)
        if role == "gateway":
            assert gpus is None and GPU not in resources.get("requests", {}), resources
        else:
            assert gpus == 1, f"{role}: {resources}"
    assert sum(o.get("kind") == "Deployment" for o in objects) == 3


def test_grpc_probes_on_the_health_port(rendered):
    _, objects = rendered
    for role, dep in deployments_by_role(objects).items():
        c, ports = container(dep), container_ports(dep)
        port = int(role_flags(dep)[HEALTH_PORT_FLAG])
        assert ports["grpc"] == port
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"] == {"port": port}, f"{role} {probe}: {c[probe]}"
        if role != "gateway":  # weight download + load + graph capture must fit in the startup budget
            startup = c["startupProbe"]
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


def test_services_select_one_deployment_and_target_its_ports(rendered):
    _, objects = rendered
    deployments = by_kind(objects, "Deployment").values()
    services = by_kind(objects, "Service")
    assert {role_of(s) for s in services.values()} == set(SERVICE_ROLES)
    for name, svc in services.items():
        matched = [d for d in deployments
                   if selects(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
        assert len(matched) == 1, f"Service {name} selects {len(matched)} Deployments"
        dep = matched[0]
        assert selects(dep["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
        ports = container_ports(dep)
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports, f"{name}: targetPort {port['targetPort']} not on the pod"
            assert port["port"] == ports[port["targetPort"]], f"{name}: {port} vs {ports}"
        headless = svc["spec"].get("clusterIP") == "None"
        assert headless == (role_of(svc) in ("talker", "vocoder")), f"{name} headless={headless}"
    gateway_ports = {p["name"] for p in services["tts-qwen3-tts-gateway"]["spec"]["ports"]}
    assert gateway_ports == {"grpc", "http", "metrics"}


def test_peers_are_discovered_through_headless_service_dns(rendered):
    _, objects = rendered
    services = by_kind(objects, "Service")
    deployments = deployments_by_role(objects)
    for role, flag, peer in (("talker", "--vocoders", "vocoder"), ("gateway", "--talkers", "talker")):
        host, port = split_endpoint(role_flags(deployments[role])[flag])
        svc = next(s for s in services.values() if role_of(s) == peer)
        assert host == f"{svc['metadata']['name']}.{NAMESPACE}.svc"
        assert svc["spec"]["clusterIP"] == "None"
        assert port == next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "zmq")
    gateway = role_flags(deployments["gateway"])
    host, port = split_endpoint(gateway["--audio-advertise"])
    assert host == "$(POD_IP)" and port == container_ports(deployments["gateway"])["audio"]
    env = {e["name"] for e in container(deployments["gateway"])["env"]}
    assert "POD_IP" in env  # kubelet expands $(POD_IP) only from a declared env var


def test_replica_counts_are_independent_per_role():
    objects = render_chart("--set", "vocoder.replicaCount=5", "--set", "talker.replicaCount=3")
    replicas = {role: d["spec"].get("replicas") for role, d in deployments_by_role(objects).items()}
    assert replicas == {"gateway": 1, "talker": 3, "vocoder": 5}


def test_multi_replica_values_scale_and_autoscale():
    objects = render_chart("-f", MULTI)
    deployments = deployments_by_role(objects)
    assert deployments["talker"]["spec"]["replicas"] == 2
    # an HPA owns the replica count of autoscaled roles: the Deployment must not fight it
    assert "replicas" not in deployments["vocoder"]["spec"] and "replicas" not in deployments["gateway"]["spec"]
    hpas = {role_of(h): h for h in by_kind(objects, "HorizontalPodAutoscaler").values()}
    assert set(hpas) == {"vocoder", "gateway"}
    for role, hpa in hpas.items():
        assert hpa["spec"]["scaleTargetRef"]["name"] == deployments[role]["metadata"]["name"]
    (metric,) = hpas["vocoder"]["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "qwen3_tts_vocoder_busy_ratio"
    assert deployments["vocoder"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {role_of(m) for m in by_kind(objects, "ServiceMonitor").values()} == set(SERVICE_ROLES)
    claims = {v["name"]: v for v in deployments["talker"]["spec"]["template"]["spec"]["volumes"]}
    assert claims["model-cache"]["persistentVolumeClaim"]["claimName"] == "qwen3-tts-weights"


def test_pdbs_select_their_role(rendered):
    _, objects = rendered
    deployments = deployments_by_role(objects)
    pdbs = {role_of(p): p for p in by_kind(objects, "PodDisruptionBudget").values()}
    assert set(pdbs) == set(SERVICE_ROLES)
    for role, pdb in pdbs.items():
        labels = deployments[role]["spec"]["template"]["metadata"]["labels"]
        assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
        others = [r for r, d in deployments.items() if r != role
                  and selects(pdb["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])]
        assert not others, f"{role} PDB also covers {others}"


def test_config_maps_feed_real_settings(rendered):
    _, objects = rendered
    config_maps = by_kind(objects, "ConfigMap")
    for role, dep in deployments_by_role(objects).items():
        (source,) = container(dep)["envFrom"]
        data = config_maps[source["configMapRef"]["name"]]["data"]
        assert data, f"{role}: empty ConfigMap"
        assert_env_keys_are_flags(role, data)
        assert_cli_accepts(role, container(dep)["args"][1:], data)
        annotation = dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        assert len(annotation) == 64  # pods roll when engine settings change


def config_data(objects, role: str) -> dict[str, str]:
    (source,) = container(deployments_by_role(objects)[role])["envFrom"]
    return by_kind(objects, "ConfigMap")[source["configMapRef"]["name"]]["data"]


def test_each_vocoder_pod_can_carry_every_stream_a_talker_admits(rendered):
    """As in the compose files: a vocoder refuses streams beyond its slots, so one pod alone (its
    peers restarting) must hold every stream of a talker (0 = auto: up to MAX_AUTO_SLOTS)."""
    _, objects = rendered
    slots = {role: int(config_data(objects, role)[f"QWEN3_TTS_{role.upper()}_MAX_SLOTS"]) or MAX_AUTO_SLOTS
             for role in ("talker", "vocoder")}
    assert slots["vocoder"] >= slots["talker"], slots


def test_four_gpu_values_give_each_pod_a_gpu_sized_from_its_memory():
    objects = render_chart("-f", FOUR)
    deployments = deployments_by_role(objects)
    assert {role: d["spec"]["replicas"] for role, d in deployments.items()} == {"gateway": 1, "talker": 2, "vocoder": 2}
    assert all(container(deployments[role])["resources"]["limits"][GPU] == 1 for role in ("talker", "vocoder"))
    talker, vocoder, gateway = (config_data(objects, role) for role in ("talker", "vocoder", "gateway"))
    assert talker["QWEN3_TTS_TALKER_MAX_SLOTS"] == "0" and float(talker["QWEN3_TTS_TALKER_GPU_MEMORY_FRACTION"]) == 0.9
    assert vocoder["QWEN3_TTS_VOCODER_GRAPH_MEMORY_BUDGET_MB"] == "0"
    assert float(vocoder["QWEN3_TTS_VOCODER_GPU_MEMORY_FRACTION"]) == 0.9
    # one vocoder pod alone holds both talkers' streams; the gateway admits their slots + queues
    assert int(vocoder["QWEN3_TTS_VOCODER_MAX_SLOTS"]) >= 2 * MAX_AUTO_SLOTS
    assert int(gateway["QWEN3_TTS_GATEWAY_MAX_STREAMS"]) >= 2 * 2 * MAX_AUTO_SLOTS


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_chart_flags_exist_in_the_service_cli(role):
    for values in VALUES.values():
        dep = deployments_by_role(render_chart(*values))[role]
        unknown = set(role_flags(dep)) - cli_flags(role)
        assert not unknown, f"chart passes {sorted(unknown)} to {role}, whose CLI has no such flags"


def test_pods_run_as_non_root(rendered):
    _, objects = rendered
    for dep in by_kind(objects, "Deployment").values():
        security = dep["spec"]["template"]["spec"]["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0


def test_side_ports_bind_the_pod_interface_explicitly(rendered):
    # Loopback is the services' default for their admin gRPC and metrics ports; probes and
    # in-cluster scrapes reach the pod IP, so the chart must ask for every interface.
    _, objects = rendered
    deployments = deployments_by_role(objects)
    for role in ("talker", "vocoder"):
        assert role_flags(deployments[role]).get("--grpc-host") == "0.0.0.0", role
    for role in SERVICE_ROLES:
        assert role_flags(deployments[role]).get("--metrics-host") == "0.0.0.0", role


def metrics_port(deployment) -> int:
    """The port the role's process serves /metrics on (its flag), checked to be the pod's `metrics` port."""
    port = int(role_flags(deployment)["--metrics-port"])
    assert container_ports(deployment).get("metrics") == port, f"{role_of(deployment)}: {container_ports(deployment)}"
    return port


def test_every_role_serves_metrics_on_its_pod_s_and_service_s_metrics_port(rendered):
    _, objects = rendered
    deployments = deployments_by_role(objects)
    services = {role_of(s): s for s in by_kind(objects, "Service").values()}
    for role, dep in deployments.items():
        port = metrics_port(dep)
        (svc_port,) = [p for p in services[role]["spec"]["ports"] if p["name"] == "metrics"]
        assert svc_port["targetPort"] == "metrics" and svc_port["port"] == port, f"{role}: {svc_port}"
    assert len({metrics_port(d) for d in deployments.values()}) == 3   # a port of its own per role


def test_service_monitors_scrape_each_role_s_metrics_port_the_vocoder_hpa_needs():
    """What the vocoders' HPA reads (qwen3_tts_vocoder_busy_ratio, through a metrics adapter) is
    scraped from every vocoder pod: a ServiceMonitor selects the vocoder Service alone, and the
    port it names leads to the container port the vocoder's --metrics-port binds."""
    objects = render_chart("-f", MULTI)
    deployments = deployments_by_role(objects)
    services = by_kind(objects, "Service").values()
    monitors = {role_of(m): m for m in by_kind(objects, "ServiceMonitor").values()}
    assert set(monitors) == set(SERVICE_ROLES)
    for role, monitor in monitors.items():
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"   # metrics.serviceMonitor.labels
        selected = [s for s in services if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        assert [role_of(s) for s in selected] == [role], f"{role} monitor selects {[role_of(s) for s in selected]}"
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        (svc_port,) = [p for p in selected[0]["spec"]["ports"] if p["name"] == endpoint["port"]]
        pod_ports = container_ports(deployments[role])
        assert pod_ports[svc_port["targetPort"]] == metrics_port(deployments[role])
    # headless: each ready vocoder pod is a target of its own, which a per-pod HPA metric needs
    vocoder_svc = next(s for s in services if role_of(s) == "vocoder")
    assert vocoder_svc["spec"]["clusterIP"] == "None"
    assert not by_kind(render_chart(), "ServiceMonitor")   # off by default (needs prometheus-operator)


def test_scrape_annotations_name_each_pod_s_metrics_port():
    for dep in deployments_by_role(render_chart()).values():
        assert not any(k.startswith("prometheus.io/") for k in dep["spec"]["template"]["metadata"]["annotations"])
    for role, dep in deployments_by_role(render_chart("--set", "metrics.scrapeAnnotations=true")).items():
        annotations = dep["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
        assert int(annotations["prometheus.io/port"]) == metrics_port(dep), role
