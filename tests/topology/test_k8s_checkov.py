"""deploy/k8s and deploy/Dockerfile, hardened: Checkov (pinned in .venv-tools, `make tools`) finds
nothing in them but the findings of SKIPS, each kept for the reason beside it; and what the
hardening promises holds against the code: every container runs as the image's user, without
privileges, on a read-only root filesystem with a volume at each path its process writes, within
CPU and memory limits, from the one image under a fixed tag.

The manifests are rendered, scanned and read here; no cluster ran them (tests/topology/test_k8s_manifests.py).
"""

import json
import re
import subprocess
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from django.conf import settings

from deploy.supervisor import procfile
from harness.processes import ROOT
from tests.topology.k8s import (
    PROCESSES,
    config,
    every_container,
    pod_spec,
    render,
    scanner,
    workloads,
)

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


class Skip(NamedTuple):
    """A finding that stays, and why; on `resource` only, or on every resource the check fails."""

    check: str
    reason: str
    resource: str | None = None


# A finding not here fails the test, and so does a skip that no longer matches any finding: the
# list only shrinks.
SKIPS = [
    Skip(
        "CKV_K8S_43",
        "Image digests: the operator builds the product's image, so its digest exists only after their "
        "build; they pin it in an overlay (kustomize `images:` with `digest:`). deploy/k8s names a fixed "
        "tag (test_every_container_runs_the_one_image_under_a_fixed_tag).",
    ),
    Skip(
        "CKV_K8S_38",
        "Service account token: the router's service discovery lists the engine pods with it (a Role that "
        "reads pods in this namespace only); every other pod mounts none.",
        resource="Deployment.chat.chat-router",
    ),
    Skip(
        "CKV_DOCKER_7",
        "Base image tag: the base is a build argument (CPU or CUDA), which Checkov does not resolve; its "
        "default is a fixed tag (test_the_image_s_base_is_a_fixed_tag).",
    ),
    Skip(
        "CKV_DOCKER_2",
        "HEALTHCHECK: one image runs six different processes, and Kubernetes ignores HEALTHCHECK; each "
        "container's probes are in deploy/k8s.",
    ),
]


def skip_of(finding: dict) -> Skip | None:
    return next(
        (
            skip
            for skip in SKIPS
            if skip.check == finding["check_id"] and skip.resource in (None, finding["resource"])
        ),
        None,
    )


def checkov_reports(folder: Path) -> list[dict]:
    """Checkov's reports (kubernetes, dockerfile) on the rendered manifests and the Dockerfile."""
    rendered = folder / "deploy-k8s.yaml"
    rendered.write_text(render())
    # --skip-download: nothing from Prisma Cloud's servers (guidelines, policies); the checks ship
    # with the package.
    command = [scanner("checkov"), "--file", rendered, "--file", DOCKERFILE, "--skip-download"]
    command += ["--framework", "kubernetes", "dockerfile", "--compact", "--output", "json"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    # Exit status 1: it found something; the reports say what.
    assert result.returncode in (0, 1), result.stderr
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


def test_checkov_finds_nothing_outside_the_skip_list(tmp_path):
    reports = checkov_reports(tmp_path)
    assert {report["check_type"] for report in reports} == {"kubernetes", "dockerfile"}
    for report in reports:
        assert report["summary"]["parsing_errors"] == 0, report["check_type"]
        assert report["summary"]["passed"] > 0, report["check_type"]
    failed = [finding for report in reports for finding in report["results"]["failed_checks"]]
    unexpected = [f"{f['check_id']} {f['check_name']}: {f['resource']}" for f in failed if skip_of(f) is None]
    assert unexpected == []
    unused = [skip.check for skip in SKIPS if skip not in {skip_of(f) for f in failed}]
    assert unused == [], "skips that match no finding any more: remove them"


def dockerfile_user() -> tuple[int, int, str]:
    """The image's user: uid, gid and home."""
    text = DOCKERFILE.read_text()
    uid = int(re.search(r"^USER (\d+)$", text, re.MULTILINE).group(1))
    useradd = re.search(r"useradd (.*?) chat\b", text).group(1)
    assert f"--uid {uid}" in useradd
    gid = int(re.search(r"--gid (\d+)", useradd).group(1))
    home = re.search(r"--home-dir (\S+)", useradd).group(1)
    return uid, gid, home


def test_every_container_runs_as_the_images_user_with_no_privileges_on_a_read_only_root(objects):
    uid, gid, _ = dockerfile_user()
    # 10000 and up: no user of the node's own, should a process break out of its container.
    assert uid >= 10000 and gid >= 10000
    for workload, container in every_container(objects):
        context = pod_spec(workload)["securityContext"]
        assert context["runAsNonRoot"] is True, container["name"]
        assert (context["runAsUser"], context["runAsGroup"]) == (uid, gid), container["name"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, container["name"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, container["name"]


def test_only_the_router_mounts_a_service_account_token(objects):
    for component, workload in workloads(objects).items():
        spec = pod_spec(workload)
        if component == "router":
            # Its Role reads pods (tests/topology/test_k8s_manifests.py), with this token.
            assert spec.get("automountServiceAccountToken", True) and spec["serviceAccountName"]
        else:
            assert spec["automountServiceAccountToken"] is False, component


def schedule_folder(objects: list[dict]) -> PurePosixPath:
    """Where beat writes its schedule: the Procfile's --schedule, under the pods' DATA_DIR."""
    line = procfile()[PROCESSES["beat"]]
    schedule = re.search(r"--schedule (\S+)", line).group(1)
    return PurePosixPath(schedule.replace("${DATA_DIR:-var}", config(objects)["DATA_DIR"])).parent


def written_paths(objects: list[dict]) -> dict[str, set[PurePosixPath]]:
    """The paths each container's process writes, by container name."""
    _, _, home = dockerfile_user()
    # tempfile's folder, as nothing sets TMPDIR: Django's spooled uploads, vLLM's and torch's files.
    tmp = PurePosixPath("/tmp")
    model = PurePosixPath(config(objects)["INFERENCE_MODEL"])
    paths = {c["name"]: {tmp} for _, c in every_container(objects)}
    paths["beat"].add(schedule_folder(objects))
    # prepare_model writes the model beside it (a rename); vLLM, torch, Triton and Hugging Face
    # keep their caches and settings in the home.
    for name in ("prepare-model", "engine"):
        paths[name] |= {model.parent, PurePosixPath(home)}
    # prepare_embedding_model likewise; the embedding server's torch and Hugging Face caches.
    embedding_model = PurePosixPath(config(objects)["EMBEDDING_MODEL"])
    for name in ("prepare-embedding-model", "embeddings"):
        paths[name] |= {embedding_model.parent, PurePosixPath(home)}
    return paths


def test_every_path_a_process_writes_is_a_volume_mounted_for_it(objects):
    writes = written_paths(objects)
    for workload, container in every_container(objects):
        assert "TMPDIR" not in {variable["name"] for variable in container.get("env", [])}
        writable = {v["name"] for v in pod_spec(workload).get("volumes", []) if "emptyDir" in v}
        writable |= {claim["metadata"]["name"] for claim in workload["spec"].get("volumeClaimTemplates", [])}
        mounts = [
            PurePosixPath(m["mountPath"])
            for m in container.get("volumeMounts", [])
            if m["name"] in writable and not m.get("readOnly")
        ]
        for path in writes[container["name"]]:
            assert any(path == m or m in path.parents for m in mounts), (container["name"], str(path))
    # Beat's folder hides the image's DATA_DIR, static files and all: only beat may mount it.
    static = PurePosixPath(config(objects)["DATA_DIR"]) / PurePosixPath(settings.STATIC_ROOT).name
    for _, container in every_container(objects):
        if container["name"] != "beat":
            hidden = [
                m
                for m in container.get("volumeMounts", [])
                if PurePosixPath(m["mountPath"]) in (static, *static.parents)
            ]
            assert hidden == [], container["name"]


def quantity(text: str | int) -> float:
    """A Kubernetes quantity (250m, 2, 512Mi, 16Gi) as a number."""
    number, unit = re.fullmatch(r"([\d.]+)(m|Ki|Mi|Gi|Ti)?", str(text)).groups()
    return float(number) * {None: 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[unit]


def test_every_container_has_cpu_and_memory_requests_within_its_limits(objects):
    for _, container in every_container(objects):
        resources = container["resources"]
        for kind in ("cpu", "memory"):
            request, limit = resources["requests"][kind], resources["limits"][kind]
            assert 0 < quantity(request) <= quantity(limit), (container["name"], kind)


def assert_fixed_tag(image: str) -> None:
    name, _, tag = image.rpartition(":")
    assert name and tag and tag != "latest" and "/" not in tag, image


def test_every_container_runs_the_one_image_under_a_fixed_tag(objects):
    images = {container["image"] for _, container in every_container(objects)}
    # The router too: the image installs vllm-router (requirements.txt), the version the tests ran.
    assert len(images) == 1
    [image] = images
    assert_fixed_tag(image)
    # A tag can be pushed again: every start asks the registry what it names now, and a node's
    # cached copy serves no pod that could not pull it.
    assert {container.get("imagePullPolicy") for _, container in every_container(objects)} == {"Always"}


def test_the_image_s_base_is_a_fixed_tag():
    assert_fixed_tag(re.search(r"^ARG BASE=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE).group(1))
