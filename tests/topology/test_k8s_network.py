"""deploy/k8s's network policies: only the product's own pods reach the engines and the router, the
web pods admit the ingress controller only, and each pod may send only to what its process
connects to, which admits it in turn."""

from urllib.parse import urlsplit

from tests.topology.k8s import (
    config,
    engine_port,
    main_container,
    pod_labels,
    secret,
    workloads,
)


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
        # Its model is on its volume: the resolver alone.
        "embeddings": DNS,
        "router": DNS | {("engine", "TCP", engine_port(objects))} | KUBERNETES_API,
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
