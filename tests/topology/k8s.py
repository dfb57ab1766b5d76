"""deploy/k8s as `kubectl kustomize` renders it, and the reading of its objects that the topology
tests share: the workloads and their containers, the ConfigMap and the Secret, the secrets each
container mounts as files, ports and flags; and the scanners' programs (`make tools`)."""

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import NoReturn
from urllib.parse import urlsplit

import pytest
import yaml
from django.conf import settings

from harness.processes import ROOT

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


def render(kustomization: Path = KUSTOMIZATION) -> str:
    """deploy/k8s (or an overlay of it) as `kubectl kustomize` renders it."""
    # The machine's kubectl, else the one .ci/run installs into the venv where the machine has none.
    kubectl = shutil.which("kubectl") or shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if kubectl is None:
        missing("kubectl", "it renders deploy/k8s (`kubectl kustomize`); .ci/run installs it")
    result = subprocess.run(
        [kubectl, "kustomize", str(kustomization)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def rendered_objects() -> list[dict]:
    return [document for document in yaml.safe_load_all(render()) if document]


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


# The ingress controller's pods, as an operator fills them in.
INGRESS_PODS = "10.244.3.17,10.244.5.9"


def engine_port(objects: list[dict]) -> int:
    engine = main_container(workloads(objects)["engine"])
    own = {variable["name"]: variable.get("value") for variable in engine.get("env", [])}
    address = urlsplit(own["INFERENCE_URL"])
    # runinference binds vLLM to INFERENCE_URL's host and port (enginehost/launcher.py).
    assert address.hostname == "0.0.0.0"
    return address.port
