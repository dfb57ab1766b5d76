"""deploy/k8s, rendered by `kubectl kustomize`, runs what the code says: each container runs its
Procfile line, sets only variables the product reads, reads only the secrets it needs, as files
mounted at /run/secrets/chat (NAME_FILE), and starts in production mode from them once the
Secret is filled in; the probes reach the health views on the ports the processes listen on, and
the Celery processes' probes (commands) pass while the process works and fail once it is stuck;
the ingress outlasts the longest answer and takes the largest upload; exactly one beat runs;
the router finds the engine pods, is what INFERENCE_URL names, and takes the engines' key from its
file; only the pods that need it are reachable, and each pod may reach only what its process
connects to (egress); the manifests are valid for Kubernetes 1.33.

These tests read the rendered manifests and check them against the code (tests/topology/test_k8s_checkov.py
scans them and checks their hardening). No cluster or container engine ran here: neither the
manifests nor deploy/Dockerfile have been applied or built.

Why one module of about 960 lines: the manifests are rendered once (kubectl kustomize) and
every check reads the same objects; split, each file would render them again.
"""

import base64
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import NoReturn
from urllib.parse import urlsplit

import pytest
import yaml
from celery.beat import Scheduler
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import resolve

from deploy.supervisor import STOP_WAIT, procfile
from enginehost.launcher import EngineSupervisor
from enginehost.router import RouterConfig
from harness.processes import ROOT, stop_group
from harness.waiting import wait_for
from monitoring import health
from tests.project.test_configuration_docs import read_by_the_product

KUSTOMIZATION = ROOT / "deploy" / "k8s"
# Checkov and kubernetes-validate: pinned by the Makefile (`make tools`), apart from the product's.
TOOLS = ROOT / ".venv-tools" / "bin"
# Each product workload's app.kubernetes.io/component label, and the Procfile process it runs.
PROCESSES = {
    "web": "web",
    "worker": "worker",
    "beat": "beat",
    "bulk": "bulk",
    "engine": "inference",
    "embeddings": "embeddings",
}
# Procfile processes Kubernetes does without: Redis is a managed service, ingress-nginx is the proxy,
# and the router runs vllm-router (through enginehost.routerlaunch) with service discovery
# (router.yaml) instead of `runrouter`'s fixed replicas.
NOT_DEPLOYED = {"redis", "nginx", "router"}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job"}
INGRESS = "nginx.ingress.kubernetes.io/"


def missing(tool: str, how: str) -> NoReturn:
    """A tool these tests need is not installed: a failure under CI, which installs every one
    (.ci/run, `make test`), a skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"{tool} is needed here: {how}", pytrace=False)
    pytest.skip(f"{tool} is not installed: {how}")


def scanner(name: str) -> Path:
    """A program of the scanners' own virtualenv (`make tools`, which `make test` runs)."""
    program = TOOLS / name
    if not program.exists():
        missing(name, "`make tools` installs it into .venv-tools")
    return program


def render() -> str:
    """deploy/k8s as `kubectl kustomize` renders it."""
    # The machine's kubectl, else the one .ci/run installs into the venv where the machine has none.
    kubectl = shutil.which("kubectl") or shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if kubectl is None:
        missing("kubectl", "it renders deploy/k8s (`kubectl kustomize`); .ci/run installs it")
    result = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZATION)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def rendered_objects() -> list[dict]:
    return [document for document in yaml.safe_load_all(render()) if document]


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return rendered_objects()


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def config(objects: list[dict]) -> dict[str, str]:
    return one(objects, "ConfigMap", "chat-config")["data"]


def secret(objects: list[dict]) -> dict[str, str]:
    found = one(objects, "Secret", "chat-secrets")
    decoded = {k: base64.b64decode(v).decode() for k, v in found.get("data", {}).items()}
    return {**decoded, **found.get("stringData", {})}


def workloads(objects: list[dict]) -> dict[str, dict]:
    """Each workload by its component label."""
    found = {}
    for o in objects:
        if o["kind"] in WORKLOAD_KINDS:
            component = o["metadata"]["labels"]["app.kubernetes.io/component"]
            assert component not in found, f"two workloads are the {component}"
            found[component] = o
    return found


def pod_labels(workload: dict) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def main_container(workload: dict) -> dict:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, "one process per pod"
    return containers[0]


def every_container(objects: list[dict]) -> list[tuple[dict, dict]]:
    """(workload, container) for every container of every workload, init containers too."""
    return [
        (workload, container)
        for workload in workloads(objects).values()
        for container in pod_spec(workload).get("initContainers", []) + pod_spec(workload)["containers"]
    ]


def product_containers(objects: list[dict]) -> list[dict]:
    """Every container that runs a process of the product's, with its settings: all but the
    router's, which runs vllm-router (enginehost.routerlaunch reads no settings)."""
    return [
        c
        for w, c in every_container(objects)
        if w["metadata"]["labels"]["app.kubernetes.io/component"] != "router"
    ]


def port_number(container: dict, port: int | str) -> int:
    """A probe's or Service's port, by number or by the container port's name."""
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p.get("name") == port)


def allowed_hosts(objects: list[dict]) -> list[str]:
    # As chatsite.env.env_list reads it.
    return [host.strip() for host in config(objects)["ALLOWED_HOSTS"].split(",") if host.strip()]


def setting(objects: list[dict], name: str) -> float:
    """The deployment's value: the ConfigMap's, else the product's default."""
    return float(config(objects).get(name, getattr(settings, name)))


def flag_values(args: list[str], flag: str) -> list[str]:
    """The values after `flag` up to the next flag."""
    start = args.index(flag) + 1
    values = []
    for arg in args[start:]:
        if arg.startswith("--"):
            break
        values.append(arg)
    return values


def test_each_process_runs_its_procfile_line_through_exec(objects):
    lines = procfile()
    # A process added to the Procfile fails here until it has a workload.
    assert set(lines) - NOT_DEPLOYED == set(PROCESSES.values())
    commands = {
        component: main_container(workload)["command"]
        for component, workload in workloads(objects).items()
        if component in PROCESSES
    }
    # As supervisord runs them (deploy/supervisor.py): the shell expands ${VAR:-default}, and
    # exec leaves the program itself to receive the kubelet's SIGTERM.
    assert commands == {
        component: ["sh", "-c", "exec " + lines[process]] for component, process in PROCESSES.items()
    }


def test_only_one_workload_runs_celery_beat(objects):
    running_beat = [
        component
        for component, workload in workloads(objects).items()
        for container in pod_spec(workload)["containers"]
        if re.search(r"celery .*\bbeat\b|--beat\b", " ".join(container.get("command", [])))
    ]
    assert running_beat == ["beat"]
    beat = workloads(objects)["beat"]
    assert beat["kind"] == "Deployment"
    assert beat["spec"]["replicas"] == 1
    # The default RollingUpdate starts the new scheduler before it stops the old one.
    assert beat["spec"]["strategy"]["type"] == "Recreate"


# The secrets each container reads, and no others: a compromised engine pod must not hold the
# database's password or the staff account's.
SECRETS_READ = {
    "web": {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "MONITORING_METRICS_TOKEN", "INFERENCE_API_KEY"},
    "worker": {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "INFERENCE_API_KEY"},
    "bulk": {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "INFERENCE_API_KEY"},
    "beat": {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"},
    "migrate": {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "STAFF_PASSWORD", "DEMO_PASSWORD"},
    # The settings (production mode needs the key); the engine's start-up state in Redis; its own key.
    "prepare-model": {"SECRET_KEY"},
    "engine": {"SECRET_KEY", "REDIS_URL", "INFERENCE_API_KEY"},
    "router": {"INFERENCE_API_KEY"},
    # The settings; the engine's key, which the embedding engine asks for too.
    "prepare-embedding-model": {"SECRET_KEY"},
    "embeddings": {"SECRET_KEY", "INFERENCE_API_KEY"},
}


# Where every container finds its secrets' files; the settings (chatsite.env.env_secret) and the
# router (enginehost.routerlaunch) read each from the file NAME_FILE names.
SECRETS_FOLDER = PurePosixPath("/run/secrets/chat")
# Readable by the owner (root) and the group, the pods' fsGroup; by no other user.
SECRET_FILE_MODE = 0o440


def mounted_secrets(workload: dict, container: dict) -> dict[str, PurePosixPath]:
    """The keys of chat-secrets mounted into `container`, each with the path of its file there."""
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    files = {}
    for mount in container.get("volumeMounts", []):
        source = volumes.get(mount["name"], {}).get("secret")
        if source is None:
            continue
        assert source["secretName"] == "chat-secrets", container["name"]
        assert mount.get("readOnly") is True and "subPath" not in mount, container["name"]
        # `items` only: without them every key of the Secret would be a file here.
        assert source["items"], container["name"]
        for item in source["items"]:
            assert item.get("mode", source.get("defaultMode")) == SECRET_FILE_MODE, (container["name"], item)
            files[item["key"]] = PurePosixPath(mount["mountPath"]) / item["path"]
    return files


def secrets_of(workload: dict, container: dict) -> set[str]:
    """The secrets `container` can read: as files only, each named by its NAME_FILE variable."""
    assert not any("secretRef" in source for source in container.get("envFrom", [])), container["name"]
    variables = container.get("env", [])
    assert not [v for v in variables if "secretKeyRef" in v.get("valueFrom", {})], container["name"]
    files = mounted_secrets(workload, container)
    named = {
        v["name"].removesuffix("_FILE"): PurePosixPath(v["value"])
        for v in variables
        if v["name"].endswith("_FILE")
    }
    assert named == {key: SECRETS_FOLDER / key for key in files} == files, container["name"]
    return set(files)


def test_every_product_container_runs_one_image_with_the_config_and_only_the_secrets_it_reads(objects):
    containers = product_containers(objects)
    assert len({container["image"] for container in containers}) == 1
    for container in containers:
        sources = {(kind, s[kind]["name"]) for s in container.get("envFrom", []) for kind in s}
        assert sources == {("configMapRef", "chat-config")}, container["name"]
    assert {c["name"]: secrets_of(w, c) for w, c in every_container(objects)} == SECRETS_READ
    assert set().union(*SECRETS_READ.values()) == set(secret(objects))  # none the Secret holds for nobody


def test_the_secrets_files_are_readable_by_the_pods_group_only(objects):
    for component, workload in workloads(objects).items():
        context = pod_spec(workload)["securityContext"]
        # The kubelet writes the files as root; the pod's fsGroup is their group, so the process
        # (its user's group) reads them under 0440 and no other user does.
        assert context["fsGroup"] == context["runAsGroup"], component
        for container in pod_spec(workload).get("initContainers", []) + pod_spec(workload)["containers"]:
            assert mounted_secrets(workload, container), container["name"]


def as_mounted(objects: list[dict], component: str, name: str, folder: Path, **values: str) -> dict[str, str]:
    """The NAME_FILE variables of container `name` (of workload `component`) with their files as the
    kubelet would write them, holding the Secret's values (or `values`), under `folder`."""
    workload = workloads(objects)[component]
    containers = pod_spec(workload).get("initContainers", []) + pod_spec(workload)["containers"]
    container = next(c for c in containers if c["name"] == name)
    contents = {**secret(objects), **values}
    env = {}
    for key, path in mounted_secrets(workload, container).items():
        local = folder / path.relative_to("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(contents[key])
        env[f"{key}_FILE"] = str(local)
    return env


def selected(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions with In) selects `labels`."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_only_the_products_own_pods_reach_the_engines_and_the_router(objects):
    pods = {component: pod_labels(workload) for component, workload in workloads(objects).items()}
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for target, callers, ports in (
        ("engine", {"router", "web", "worker", "bulk"}, {8100}),
        ("router", {"web", "worker", "bulk"}, {8000, 29000}),
        ("embeddings", {"web", "worker", "bulk"}, {8200}),
    ):
        [policy] = [p for p in policies if selected(p["spec"]["podSelector"], pods[target])]
        assert "Ingress" in policy["spec"]["policyTypes"]
        [rule] = policy["spec"]["ingress"]
        allowed = {
            c for c, labels in pods.items() for peer in rule["from"] if selected(peer["podSelector"], labels)
        }
        assert allowed == callers, target
        assert {port["port"] for port in rule["ports"]} == ports
        container = main_container(workloads(objects)[target])
        assert {p["containerPort"] for p in container["ports"]} == ports


def test_it_sets_only_variables_the_product_reads(objects):
    names = set(config(objects)) | set(secret(objects))
    names |= {variable["name"] for c in product_containers(objects) for variable in c.get("env", [])}
    assert names - read_by_the_product() == set()


def test_the_secret_holds_placeholders_only(objects):
    values = secret(objects)
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= set(values)
    # Real secrets come from an overlay or a secret manager, never from this file in git; an
    # empty password is one bootstrap_users chooses at random.
    assert [name for name, value in values.items() if value and "REPLACE_ME" not in value] == []


PRODUCTION_CHECK = """
import json
import django
from django.conf import settings
from django.core.management import call_command

django.setup()
call_command("check", deploy=True, fail_level="WARNING")
print(json.dumps({
    "DEBUG": settings.DEBUG,
    "ALLOWED_HOSTS": settings.ALLOWED_HOSTS,
    "SECURE_PROXY_SSL_HEADER": getattr(settings, "SECURE_PROXY_SSL_HEADER", None),
    "TRUSTED_PROXIES": settings.TRUSTED_PROXIES,
    "SECRET_KEY": settings.SECRET_KEY,
    "REDIS_URL": settings.REDIS_URL,
}))
"""


# The ingress controller's pods, as an operator fills them in.
INGRESS_PODS = "10.244.3.17,10.244.5.9"


def run_product(objects: list[dict], folder: Path, **overrides: str) -> subprocess.CompletedProcess:
    """The product's settings and `check --deploy` under the ConfigMap and the Secret alone, the
    Secret's keys as files, as a web pod has them (an override of one of them goes in its file)."""
    keys = set(secret(objects))
    files = as_mounted(objects, "web", "web", folder, **{k: v for k, v in overrides.items() if k in keys})
    env = {
        **config(objects),
        **files,
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "chatsite.settings",
        **{k: v for k, v in overrides.items() if k not in keys},
    }
    command = [sys.executable, "-c", PRODUCTION_CHECK]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_it_refuses_to_start_until_the_secret_key_and_the_trusted_proxies_are_replaced(objects, tmp_path):
    result = run_product(objects, tmp_path / "placeholders")
    assert result.returncode != 0
    assert "TRUSTED_PROXIES" in result.stderr or "SECRET_KEY must be set" in result.stderr
    result = run_product(objects, tmp_path / "proxies", TRUSTED_PROXIES=INGRESS_PODS)
    assert "SECRET_KEY must be set" in result.stderr
    metrics = secrets.token_urlsafe(32)
    result = run_product(
        objects, tmp_path / "key", SECRET_KEY=secrets.token_urlsafe(50), MONITORING_METRICS_TOKEN=metrics
    )
    assert "TRUSTED_PROXIES: 'REPLACE_ME' is not an address or a network" in result.stderr


def test_it_refuses_a_placeholder_or_short_metrics_token_in_production(objects, tmp_path):
    key = secrets.token_urlsafe(50)
    for number, token in enumerate(("REPLACE_ME", "short-token", "x" * 40)):
        result = run_product(
            objects,
            tmp_path / str(number),
            SECRET_KEY=key,
            MONITORING_METRICS_TOKEN=token,
            TRUSTED_PROXIES=INGRESS_PODS,
        )
        assert result.returncode != 0, token
        assert "MONITORING_METRICS_TOKEN" in result.stderr


def test_it_runs_in_production_mode_once_the_secret_is_filled_in(objects, tmp_path):
    key = secrets.token_urlsafe(50)
    result = run_product(
        objects,
        tmp_path,
        SECRET_KEY=key,
        MONITORING_METRICS_TOKEN=secrets.token_urlsafe(32),
        TRUSTED_PROXIES=INGRESS_PODS,
    )
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout.splitlines()[-1])
    assert values["DEBUG"] is False
    assert values["ALLOWED_HOSTS"] and "*" not in values["ALLOWED_HOSTS"]
    # TLS ends at the ingress: without these Django sees plain HTTP and every client as the proxy.
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["TRUSTED_PROXIES"]
    # From the mounted files: no secret is in the environment.
    assert (values["SECRET_KEY"], values["REDIS_URL"]) == (key, secret(objects)["REDIS_URL"])


def test_the_web_probes_reach_the_health_views_on_the_web_port(objects):
    values = config(objects)
    # The Procfile's default, 127.0.0.1, would not answer the kubelet or the Service.
    assert values["WEB_BIND"] in {"0.0.0.0", "::"}
    web = main_container(workloads(objects)["web"])
    port = int(values["WEB_PORT"])
    assert [p["containerPort"] for p in web["ports"]] == [port]
    for probe, view in (("livenessProbe", health.live), ("readinessProbe", health.ready)):
        request = web[probe]["httpGet"]
        assert resolve(request["path"]).func is view
        assert port_number(web, request["port"]) == port
        # Without a Host header the kubelet sends the pod's address, and ALLOWED_HOSTS answers 400.
        headers = {header["name"].lower(): header["value"] for header in request.get("httpHeaders", [])}
        assert "host" in headers, f"{probe} sends no Host header"
        assert validate_host(split_domain_port(headers["host"])[0], allowed_hosts(objects))
    service = one(objects, "Service", "chat-web")
    assert service["spec"]["selector"].items() <= pod_labels(workloads(objects)["web"]).items()
    assert [port_number(web, p["targetPort"]) for p in service["spec"]["ports"]] == [port]


def test_a_stopping_web_pod_drains_before_it_is_killed_and_a_rolling_update_keeps_every_pod(objects):
    workload = workloads(objects)["web"]
    spec = pod_spec(workload)
    web = main_container(workload)
    pre_stop = web["lifecycle"]["preStop"]["sleep"]["seconds"]
    # SIGTERM comes after the preStop wait; the pod then drains for WEB_DRAIN_SECONDS (answers.drain).
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + setting(objects, "WEB_DRAIN_SECONDS") + 5
    assert pre_stop >= 2  # long enough for the endpoints to drop the pod before it stops listening
    rolling = workload["spec"]["strategy"]["rollingUpdate"]
    assert (rolling["maxUnavailable"], rolling["maxSurge"]) == (0, 1)
    # supervisord waits as long for it under `make run`.
    assert STOP_WAIT["web"] >= settings.WEB_DRAIN_SECONDS + 5


def nginx_size(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kKmMgG]?)", text).groups()
    return int(number) * 1024 ** " kmg".index(unit.lower() or " ")


def test_the_ingress_outlasts_the_longest_answer_and_takes_the_largest_upload(objects):
    ingress = one(objects, "Ingress")
    annotations = ingress["metadata"]["annotations"]
    longest_answer = setting(objects, "CHAT_TOTAL_TIMEOUT")
    assert float(annotations[INGRESS + "proxy-read-timeout"]) > longest_answer
    assert float(annotations[INGRESS + "proxy-send-timeout"]) > longest_answer
    # Server-Sent Events pass event by event.
    assert annotations[INGRESS + "proxy-buffering"] == "off"
    assert nginx_size(annotations[INGRESS + "proxy-body-size"]) >= setting(objects, "BULK_MAX_UPLOAD_BYTES")
    for rule in ingress["spec"]["rules"]:
        assert validate_host(rule["host"], allowed_hosts(objects)), rule["host"]
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == "chat-web"
            service_ports = one(objects, "Service", "chat-web")["spec"]["ports"]
            known = {p.get("name") for p in service_ports} | {p["port"] for p in service_ports}
            assert (backend["port"].get("name") or backend["port"].get("number")) in known - {None}


def engine_port(objects: list[dict]) -> int:
    engine = main_container(workloads(objects)["engine"])
    own = {variable["name"]: variable.get("value") for variable in engine.get("env", [])}
    address = urlsplit(own["INFERENCE_URL"])
    # runinference binds vLLM to INFERENCE_URL's host and port (enginehost/launcher.py).
    assert address.hostname == "0.0.0.0"
    return address.port


def test_the_engine_serves_and_reports_ready_on_its_own_address(objects):
    workload = workloads(objects)["engine"]
    engine = main_container(workload)
    port = engine_port(objects)
    assert [p["containerPort"] for p in engine["ports"]] == [port]
    for probe in ("readinessProbe", "startupProbe"):
        request = engine[probe]["httpGet"]
        assert (request["path"], port_number(engine, request["port"])) == ("/health", port), probe
    # Model load, up to runinference's own wait for the engine's health check.
    startup = engine["startupProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert budget >= setting(objects, "INFERENCE_STARTUP_TIMEOUT")
    assert int(engine["resources"]["limits"]["nvidia.com/gpu"]) == 1


def test_the_embedding_engine_serves_on_its_own_address_behind_the_service_embedding_url_names(objects):
    embeddings = main_container(workloads(objects)["embeddings"])
    own = {variable["name"]: variable.get("value") for variable in embeddings.get("env", [])}
    address = urlsplit(own["EMBEDDING_URL"])
    # runembeddings binds its server to EMBEDDING_URL's host and port (enginehost/embedlaunch.py).
    assert address.hostname == "0.0.0.0"
    assert [p["containerPort"] for p in embeddings["ports"]] == [address.port]
    for probe in ("readinessProbe", "startupProbe", "livenessProbe"):
        request = embeddings[probe]["httpGet"]
        assert (request["path"], port_number(embeddings, request["port"])) == ("/health", address.port), probe
    service = urlsplit(config(objects)["EMBEDDING_URL"])
    found = one(objects, "Service", service.hostname)
    assert selected({"matchLabels": found["spec"]["selector"]}, pod_labels(workloads(objects)["embeddings"]))
    assert [port["port"] for port in found["spec"]["ports"]] == [service.port]
    prepare = pod_spec(workloads(objects)["embeddings"])["initContainers"][0]
    assert prepare["command"] == ["sh", "-c", "exec python manage.py prepare_embedding_model"]


def test_the_model_volume_holds_inference_model_where_prepare_model_writes_it(objects):
    workload = workloads(objects)["engine"]
    claims = {claim["metadata"]["name"] for claim in workload["spec"].get("volumeClaimTemplates", [])}
    claims |= {v["name"] for v in pod_spec(workload).get("volumes", []) if "persistentVolumeClaim" in v}
    model = PurePosixPath(config(objects)["INFERENCE_MODEL"])
    prepare = next(c for c in pod_spec(workload)["initContainers"] if c["name"] == "prepare-model")
    assert prepare["command"] == ["sh", "-c", "exec python manage.py prepare_model"]
    for container in (prepare, main_container(workload)):
        mounts = [m for m in container["volumeMounts"] if m["name"] in claims]
        # A parent, not the model directory itself: prepare_model replaces that by a rename.
        assert [m for m in mounts if PurePosixPath(m["mountPath"]) in model.parents], container["name"]


def test_the_router_discovers_the_engine_pods_and_no_others(objects):
    router = main_container(workloads(objects)["router"])
    args = router.get("command", []) + router.get("args", [])
    assert "--service-discovery" in args
    selector = dict(pair.split("=", 1) for pair in flag_values(args, "--selector"))
    assert selector
    matched = [c for c, w in workloads(objects).items() if selector.items() <= pod_labels(w).items()]
    assert matched == ["engine"]
    assert flag_values(args, "--service-discovery-port") == [str(engine_port(objects))]
    # Its own namespace, through the downward API, whatever namespace the overlay picks.
    assert flag_values(args, "--service-discovery-namespace") == ["$(POD_NAMESPACE)"]
    namespace = next(variable for variable in router["env"] if variable["name"] == "POD_NAMESPACE")
    assert namespace["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_router_takes_the_engines_key_from_its_file_not_its_command_line(objects, tmp_path, monkeypatch):
    from vllm_router.launch_router import parse_router_args

    from enginehost import routerlaunch

    router = main_container(workloads(objects)["router"])
    assert router["command"] == ["python", "-m", "enginehost.routerlaunch"]
    # vllm-router's own arguments, without the key, which `ps` would show.
    args = [arg.replace("$(POD_NAMESPACE)", "chat") for arg in router["args"]]
    assert not [arg for arg in args if arg.startswith("--api-key")]
    assert parse_router_args(args).api_key is None
    # routerlaunch gives it the key from the mounted file.
    key = secrets.token_urlsafe(32)
    files = as_mounted(objects, "router", "router", tmp_path, INFERENCE_API_KEY=key)
    assert set(files) == {"INFERENCE_API_KEY_FILE"}
    monkeypatch.delenv("INFERENCE_API_KEY", raising=False)
    monkeypatch.setenv("INFERENCE_API_KEY_FILE", files["INFERENCE_API_KEY_FILE"])
    assert routerlaunch.engine_key() == key


def test_the_router_routes_and_sets_failing_engines_aside_as_make_run_s_does(objects):
    router = main_container(workloads(objects)["router"])
    args = router.get("command", []) + router.get("args", [])
    flags = RouterConfig.from_settings(settings, ["http://engine:8100"]).routing_flags()
    start = args.index(flags[0])
    assert args[start : start + len(flags)] == flags


def test_inference_url_names_the_router_service(objects):
    address = urlsplit(config(objects)["INFERENCE_URL"])
    service = one(objects, "Service", address.hostname.split(".")[0])
    workload = workloads(objects)["router"]
    assert service["spec"]["selector"].items() <= pod_labels(workload).items()
    router = main_container(workload)
    target = next(p["targetPort"] for p in service["spec"]["ports"] if p["port"] == address.port)
    args = router.get("command", []) + router.get("args", [])
    assert flag_values(args, "--port") == [str(port_number(router, target))]


def allows(rules: list[dict], verb: str) -> bool:
    return any(
        set(rule.get("apiGroups", [])) & {"", "*"}
        and set(rule.get("resources", [])) & {"pods", "*"}
        and set(rule.get("verbs", [])) & {verb, "*"}
        for rule in rules
    )


def test_the_router_may_watch_the_pods_it_discovers(objects):
    account = pod_spec(workloads(objects)["router"])["serviceAccountName"]
    namespace = one(objects, "ServiceAccount", account)["metadata"].get("namespace")
    roles = [
        one(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for binding in objects
        if binding["kind"] == "RoleBinding"
        for subject in binding.get("subjects", [])
        if subject["kind"] == "ServiceAccount"
        and subject["name"] == account
        and subject.get("namespace", binding["metadata"].get("namespace")) == namespace
    ]
    rules = [rule for role in roles for rule in role.get("rules", [])]
    assert all(allows(rules, verb) for verb in ("get", "list", "watch"))


MIGRATE = "python manage.py migrate --noinput && exec python manage.py bootstrap_users"


def test_a_job_migrates_the_database_before_creating_the_accounts(objects):
    job = workloads(objects)["migrate"]
    assert job["kind"] == "Job"
    script = main_container(job)["command"]
    assert script[:2] == ["sh", "-c"]
    assert script[2].endswith("; " + MIGRATE)


PASSWORDS = """
import json
import django
from django.conf import settings

django.setup()
print(json.dumps({"STAFF_PASSWORD": settings.STAFF_PASSWORD, "DEMO_PASSWORD": settings.DEMO_PASSWORD}))
"""


def test_the_job_takes_an_empty_password_file_as_no_password(objects, tmp_path):
    # The placeholder Secret's passwords are empty (bootstrap_users then picks random ones), and the
    # settings refuse an empty NAME_FILE: the Job's script forgets those first.
    script = main_container(workloads(objects)["migrate"])["command"]
    prelude = script[2].removesuffix(MIGRATE)
    assert prelude != script[2]
    for number, (staff, demo) in enumerate((("", ""), ("a staff password", ""), ("", "\n"))):
        env = {
            **config(objects),
            **as_mounted(
                objects,
                "migrate",
                "migrate",
                tmp_path / str(number),
                SECRET_KEY=secrets.token_urlsafe(50),
                STAFF_PASSWORD=staff,
                DEMO_PASSWORD=demo,
            ),
            "TRUSTED_PROXIES": INGRESS_PODS,
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "chatsite.settings",
        }
        command = ["sh", "-c", prelude + 'exec "$0" -c "$1"', sys.executable, PASSWORDS]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        passwords = json.loads(result.stdout.splitlines()[-1])
        assert passwords == {"STAFF_PASSWORD": staff.strip(), "DEMO_PASSWORD": demo.strip()}


def test_the_image_and_the_manifests_agree(objects):
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    # collectstatic fills DATA_DIR/static at build time: the pods must read the same DATA_DIR.
    assert re.search(r"\bDATA_DIR=(\S+)", dockerfile).group(1) == config(objects)["DATA_DIR"]
    # runAsNonRoot accepts only a numeric user; the engine's volume is writable by its group.
    user = re.search(r"^USER (\S+)$", dockerfile, re.MULTILINE).group(1)
    assert user.isdigit()
    assert pod_spec(workloads(objects)["engine"])["securityContext"]["fsGroup"] == int(user)


# The Kubernetes the manifests are checked against (the web pods' preStop `sleep` needs 1.30).
KUBERNETES_VERSION = "1.33.0"


def test_the_manifests_are_valid_kubernetes_objects(tmp_path):
    rendered = tmp_path / "deploy-k8s.yaml"
    rendered.write_text(render())
    command = [scanner("kubernetes-validate"), "--kubernetes-version", KUBERNETES_VERSION]
    # --strict: a field Kubernetes does not know (a typo, a field of another version) fails too.
    result = subprocess.run(
        [*command, "--strict", "--quiet", rendered], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_web_pods_admit_the_ingress_controller_only_and_the_other_pods_nothing(objects):
    pods = {component: pod_labels(workload) for component, workload in workloads(objects).items()}
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    governing = {
        c: [p for p in policies if selected(p["spec"]["podSelector"], labels)] for c, labels in pods.items()
    }
    assert all(len(found) == 1 for found in governing.values()), governing
    [web] = governing["web"]
    [rule] = web["spec"]["ingress"]
    # The namespace TRUSTED_PROXIES's pods live in (docs/deploy.md), on the port the pods listen on.
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    ]
    assert [port["port"] for port in rule["ports"]] == [int(config(objects)["WEB_PORT"])]
    for component in ("worker", "beat", "bulk", "migrate"):
        [policy] = governing[component]
        assert "Ingress" in policy["spec"]["policyTypes"] and not policy["spec"].get("ingress"), component
        assert "ports" not in main_container(workloads(objects)[component]), component


# The cluster's resolver, as the policies name it (kube-dns: CoreDNS's labels on the common clusters).
KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
DNS = {("dns", "UDP", 53), ("dns", "TCP", 53)}
# Ports of the Kubernetes API server behind the `kubernetes` Service (443 on managed clusters, 6443
# on kubeadm's), which the router's service discovery watches.
KUBERNETES_API = {("any", "TCP", 443), ("any", "TCP", 6443)}


def governing_policies(objects: list[dict], component: str) -> list[dict]:
    labels = pod_labels(workloads(objects)[component])
    return [o for o in objects if o["kind"] == "NetworkPolicy" and selected(o["spec"]["podSelector"], labels)]


def peers(objects: list[dict], rule_peers: list[dict] | None) -> set[str]:
    """What a rule's `to` (or `from`) names: product workloads by component, "dns", or "any"."""
    if not rule_peers:
        return {"any"}
    names = set()
    for peer in rule_peers:
        if peer == KUBE_DNS:
            names.add("dns")
            continue
        # Only the namespace's own pods otherwise: no other namespace, no address block.
        assert set(peer) == {"podSelector"}, peer
        found = {c for c, w in workloads(objects).items() if selected(peer["podSelector"], pod_labels(w))}
        assert found, peer
        names |= found
    return names


def egress_of(objects: list[dict], component: str) -> set[tuple[str, str, int]]:
    """Where a workload's pods may connect: (destination, protocol, port)."""
    allowed = set()
    policies = [p for p in governing_policies(objects, component) if "Egress" in p["spec"]["policyTypes"]]
    assert policies, f"no policy limits what the {component} pods may reach"
    for policy in policies:
        for rule in policy["spec"].get("egress", []):
            # A rule without ports would open every port of its destinations.
            assert rule.get("ports"), (policy["metadata"]["name"], rule)
            for destination in peers(objects, rule.get("to")):
                allowed |= {(destination, p.get("protocol", "TCP"), p["port"]) for p in rule["ports"]}
    return allowed


def test_every_pod_may_reach_only_what_its_process_connects_to(objects):
    values = secret(objects)
    # The managed services', outside the manifests: their ports, at any address.
    redis = {("any", "TCP", urlsplit(values["REDIS_URL"]).port)}
    database = {("any", "TCP", urlsplit(values["DATABASE_URL"]).port)}
    inference = {
        ("router", "TCP", 8000),
        ("router", "TCP", 29000),
        ("engine", "TCP", engine_port(objects)),
        ("embeddings", "TCP", 8200),
    }
    expected = {
        # The chat, the API and the dashboard; the Celery workers' bulk jobs and housekeeping.
        "web": DNS | redis | database | inference,
        "worker": DNS | redis | database | inference,
        "bulk": DNS | redis | database | inference,
        "beat": DNS | redis | database,
        "migrate": DNS | redis | database,
        # runinference's start-up state in Redis; the model is on its volume.
        "engine": DNS | redis,
        "router": DNS | {("engine", "TCP", engine_port(objects))} | KUBERNETES_API,
        # Its model is on its volume: the resolver alone.
        "embeddings": DNS,
    }
    assert {component: egress_of(objects, component) for component in workloads(objects)} == expected
    # The engine, which runs the model: the resolver and Redis, and no other port anywhere.
    ports = {(protocol, port) for _, protocol, port in egress_of(objects, "engine")}
    assert ports == {("UDP", 53), ("TCP", 53), ("TCP", urlsplit(values["REDIS_URL"]).port)}
    assert {d for d, _, port in egress_of(objects, "engine") if port == 53} == {"dns"}


def test_what_a_pod_may_send_to_another_the_other_admits_and_the_reverse(objects):
    # Between the product's own pods, egress and ingress allow the same connections: a connection
    # one side refuses is a rule that does nothing, or a call that cannot work.
    sent = {
        (source, destination, port)
        for source in workloads(objects)
        for destination, _, port in egress_of(objects, source)
        if destination in workloads(objects)
    }
    admitted = set()
    for destination in workloads(objects):
        for policy in governing_policies(objects, destination):
            for rule in policy["spec"].get("ingress", []):
                sources = {
                    c
                    for peer in rule.get("from", [])
                    if set(peer) == {"podSelector"}
                    for c, w in workloads(objects).items()
                    if selected(peer["podSelector"], pod_labels(w))
                }
                admitted |= {(s, destination, p["port"]) for s in sources for p in rule["ports"]}
    assert sent == admitted


def test_the_engine_pod_is_restarted_only_when_its_server_stays_down_longer_than_a_restart(objects):
    engine = main_container(workloads(objects)["engine"])
    live = engine["livenessProbe"]
    assert (live["httpGet"]["path"], port_number(engine, live["httpGet"]["port"])) == (
        "/health",
        engine_port(objects),
    )
    # runinference restarts a dead server itself (EngineSupervisor): its longest wait, then a start
    # of up to INFERENCE_STARTUP_TIMEOUT. Only a server that stays down longer is a hung one.
    restart = EngineSupervisor.RESTART_DELAY_MAX + setting(objects, "INFERENCE_STARTUP_TIMEOUT")
    assert live["periodSeconds"] * live["failureThreshold"] > restart + live["periodSeconds"]


def probe_command(container: dict, probe: str) -> list[str]:
    command = container[probe]["exec"]["command"]
    assert command[:2] == ["sh", "-c"], command
    return command


# The pod's hostname, as Celery's %h reads it (socket.gethostname), from any shell.
POD_HOSTNAME = "$(cat /proc/sys/kernel/hostname)"


def test_each_celery_worker_s_probes_ping_the_node_name_its_command_gives_it(objects):
    for component in ("worker", "bulk"):
        container = main_container(workloads(objects)[component])
        line = procfile()[PROCESSES[component]]
        given = re.search(r"--hostname (\S+)", line)
        node = given.group(1) if given else "celery@%h"  # Celery's default
        ping = f"exec celery --app chatsite inspect ping --destination {node.replace('%h', POD_HOSTNAME)} "
        for probe in ("readinessProbe", "livenessProbe"):
            command = probe_command(container, probe)
            assert command[2].startswith(ping), (component, probe)
            # The probe waits for the ping's own wait for a reply.
            timeout = float(flag_values(command[2].split(), "--timeout")[0])
            assert container[probe]["timeoutSeconds"] > timeout, (component, probe)
        live = container["livenessProbe"]
        # A broker that is away for a few minutes restarts no worker.
        assert live["periodSeconds"] * live["failureThreshold"] >= 300, component


def celery_env(**extra: str) -> dict[str, str]:
    """A Celery process of the product's on the suite's Redis database, as a pod's would be."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DJANGO_SETTINGS_MODULE": "chatsite.settings",
        "REDIS_URL": settings.REDIS_URL,
        **extra,
    }


def probe_passes(command: list[str], env: dict[str, str], timeout: float) -> bool:
    """As the kubelet judges an exec probe: exit status 0 within its timeoutSeconds."""
    try:
        return (
            subprocess.run(command, env=env, cwd=ROOT, capture_output=True, timeout=timeout).returncode == 0
        )
    except subprocess.TimeoutExpired:
        return False


@contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`command` in a process group of its own, its output in `log`; stopped (woken first, should a
    test have stopped it with SIGSTOP) on the way out."""
    with open(log, "w") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGCONT)
        stop_group(process, signal.SIGTERM, 30)


def test_a_worker_passes_its_probe_while_it_consumes_and_fails_it_once_its_main_process_is_stuck(
    objects, tmp_path
):
    container = main_container(workloads(objects)["worker"])
    probe = probe_command(container, "livenessProbe")
    timeout = container["livenessProbe"]["timeoutSeconds"]
    env = celery_env()
    log = tmp_path / "worker.log"
    # The pod's command, on a queue of its own: it takes none of the suite's tasks.
    command = [*container["command"][:2], container["command"][2] + " --queues k8s-probe-test"]
    with running(command, env, log) as worker:
        wait_for(lambda: " ready." in log.read_text() or worker.poll() is not None, 90, "Celery worker")
        assert worker.poll() is None, log.read_text()
        assert probe_passes(probe, env, timeout), log.read_text()
        os.kill(worker.pid, signal.SIGSTOP)  # the main process, which answers pings, not its pool
        assert not probe_passes(probe, env, timeout)


def test_beat_passes_its_probe_while_it_writes_its_schedule_and_fails_it_once_it_stops(objects, tmp_path):
    container = main_container(workloads(objects)["beat"])
    probe = probe_command(container, "livenessProbe")
    assert probe_command(container, "readinessProbe") == probe
    window = int(re.search(r"-mmin -(\d+)\b", probe[2]).group(1)) * 60
    # Beat writes its schedule every sync_every seconds, checked after each sleep, which lasts
    # until the next task is due at the latest: the shortest interval of its schedule.
    shortest = min(entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values())
    assert window > Scheduler.sync_every + shortest
    env = celery_env(DATA_DIR=str(tmp_path))
    assert not probe_passes(probe, env, 10), "passes before beat wrote anything"
    log = tmp_path / "beat.log"
    with running(container["command"], env, log) as beat:
        wait_for(lambda: probe_passes(probe, env, 10) or beat.poll() is not None, 60, "beat's schedule")
        assert beat.poll() is None, log.read_text()
    # What a beat stuck for longer than the window leaves behind.
    written = [path for path in tmp_path.iterdir() if path.name.startswith("celerybeat-schedule")]
    assert written
    stale = time.time() - window - 60
    for path in written:
        os.utime(path, (stale, stale))
    assert not probe_passes(probe, env, 10)
