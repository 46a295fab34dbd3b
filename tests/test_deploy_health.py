"""deploy/kubernetes/health.yaml: the health loop's DaemonSet, its settings and the RBAC it needs,
valid against the Kubernetes schemas of several releases and consistent with ccdiag itself: the
ConfigMap's health.toml is one ccdiag reads, the container's arguments are ones it accepts, and the
ClusterRole allows every request the loop makes (recorded against the stand-in API server) and no
more."""

from __future__ import annotations

import pytest

from conftest import REPO

yaml = pytest.importorskip("yaml")

MANIFEST = REPO / "deploy" / "kubernetes" / "health.yaml"
MAIN = REPO / "deploy" / "kubernetes" / "ccdiag.yaml"
K8S_VERSIONS = ("1.30.0", "1.33.0", "1.37.0")
KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet")


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def test_the_manifest_holds_each_object_once(docs):
    kinds = [d["kind"] for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert sorted(kinds) == sorted(KINDS)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schemas(docs, version):
    kv = pytest.importorskip("kubernetes_validate")
    for kind in KINDS:
        kv.validate(docs[kind], version, strict=True)


def test_a_mistake_is_caught_by_that_validation(docs):
    kv = pytest.importorskip("kubernetes_validate")
    import copy

    broken = copy.deepcopy(docs["ClusterRole"])
    broken["rules"][0]["verb"] = ["get"]  # "verbs"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, K8S_VERSIONS[0], strict=True)


def test_the_pieces_join_each_other_and_ccdiag_yaml(docs):
    main = {d["kind"]: d for d in yaml.safe_load_all(MAIN.read_text()) if d}
    namespace = main["Namespace"]["metadata"]["name"]
    ds, sa, crb, cm = docs["DaemonSet"], docs["ServiceAccount"], docs["ClusterRoleBinding"], docs["ConfigMap"]
    pod = ds["spec"]["template"]["spec"]
    assert {ds["metadata"]["namespace"], sa["metadata"]["namespace"], cm["metadata"]["namespace"]} == {namespace}
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": namespace}]
    assert crb["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    assert pod["priorityClassName"] in main["ResourceQuota"]["spec"]["scopeSelector"]["matchExpressions"][0]["values"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/etc/ccdiag"]]["configMap"]["name"] == cm["metadata"]["name"]
    # the settings it reads are ccdiag's, for Kubernetes, with the state where the host keeps it
    from ccdiag.health.config import parse_health_config

    cfg = parse_health_config(cm["data"]["health.toml"], "health.yaml ConfigMap")
    assert cfg.scheduler == "kubernetes"
    assert volumes[mounts[cfg.state_dir]]["hostPath"]["path"] == cfg.state_dir
    assert container["args"][-1] == "/etc/ccdiag/health.toml"
    # it tolerates the taint it may set, so it can lift it after a pass
    assert any(t["key"] == cfg.kubernetes.taint_key for t in pod["tolerations"])
    assert pod["nodeSelector"] == dict([cfg.kubernetes.node_selector.split("=")])


def test_the_container_arguments_are_ones_ccdiag_accepts(docs):
    from cli_runner import run

    args = docs["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
    code, out, err = run(*args[:2], "--help")
    assert code == 0, err
    for opt in (a for a in args[2:] if a.startswith("--")):
        assert opt in out


def _allowed(role: dict, verb: str, resource: str) -> bool:
    return any(verb in r["verbs"] and resource in r["resources"] and "" in r["apiGroups"] for r in role["rules"])


def _verb_and_resource(request: dict) -> tuple[str, str]:
    parts = request["path"].strip("/").split("/")[2:]  # after /api/v1
    resource = parts[0] + ("/" + parts[2] if len(parts) > 2 else "")
    verb = {"PATCH": "patch"}.get(request["method"]) or ("get" if len(parts) > 1 else "list")
    return verb, resource


@pytest.mark.slow  # starts the stand-in API server
def test_the_cluster_role_allows_every_call_the_loop_makes_and_nothing_else(docs):
    from ccdiag.health import conditions as C
    from ccdiag.health.kube import KubeClient
    from fake_kube_api import TOKEN, FakeApi, node

    role = docs["ClusterRole"]
    with FakeApi() as api:
        api.nodes["n1"] = node("n1", {"nvidia.com/gpu.present": "true"})
        client = KubeClient(api=api.url, token=TOKEN)
        client.get_node("n1")
        client.list_nodes("nvidia.com/gpu.present=true")
        client.pods_on_node("n1")
        client.patch_conditions("n1", [C.passed("CcdiagHealthy", 0.0, 1.0, "check", None)])
        client.set_taints("n1", lambda ts: C.with_taint(ts, "ccdiag/unhealthy", "reboot"))
    used = {_verb_and_resource(r) for r in api.requests}
    assert used == {("get", "nodes"), ("list", "nodes"), ("list", "pods"), ("patch", "nodes/status"), ("patch", "nodes")}
    for verb, resource in used:
        assert _allowed(role, verb, resource), (verb, resource)
    granted = {(v, r) for rule in role["rules"] for v in rule["verbs"] for r in rule["resources"]}
    assert granted == used  # least privilege: nothing the loop does not use
