"""deploy/k8s, rendered by `kubectl kustomize`, runs what the code says: each container runs its
Procfile line, sets only variables the product reads, reads only the secrets it needs, as files
mounted at /run/secrets/chat (NAME_FILE); the ingress outlasts the longest answer and takes the
largest upload; exactly one beat runs; the engine serves on its own address from the volume
prepare_model writes; the router finds the engine pods, is what INFERENCE_URL names, and takes the
engines' key from its file; a job migrates before the accounts are made; the manifests are valid
for Kubernetes 1.33.

These tests read the rendered manifests and check them against the code; beside them,
test_k8s_production.py starts the settings under them, test_k8s_network.py reads their network
policies, test_k8s_probes.py their probes, and test_k8s_checkov.py scans them for hardening. No
cluster or container engine ran here: neither the manifests nor deploy/Dockerfile have been
applied or built."""

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import validate_host

from deploy.supervisor import procfile
from enginehost.router import RouterConfig
from harness.processes import ROOT
from tests.project.test_configuration_docs import read_by_the_product
from tests.topology.k8s import (
    INGRESS,
    INGRESS_PODS,
    NOT_DEPLOYED,
    PROCESSES,
    SECRETS_FOLDER,
    allowed_hosts,
    as_mounted,
    config,
    engine_port,
    every_container,
    flag_values,
    main_container,
    mounted_secrets,
    one,
    pod_labels,
    pod_spec,
    port_number,
    product_containers,
    render,
    scanner,
    secret,
    setting,
    workloads,
)


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
    # The settings; the engine's key, which the embedding engine asks for too.
    "prepare-embedding-model": {"SECRET_KEY"},
    "embeddings": {"SECRET_KEY", "INFERENCE_API_KEY"},
    "engine": {"SECRET_KEY", "REDIS_URL", "INFERENCE_API_KEY"},
    "router": {"INFERENCE_API_KEY"},
}


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
    assert found["spec"]["selector"].items() <= pod_labels(workloads(objects)["embeddings"]).items()
    assert [port["port"] for port in found["spec"]["ports"]] == [service.port]
    prepare = pod_spec(workloads(objects)["embeddings"])["initContainers"][0]
    assert prepare["command"] == ["sh", "-c", "exec python manage.py prepare_embedding_model"]
