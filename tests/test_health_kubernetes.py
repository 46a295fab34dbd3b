"""The CcdiagHealthy node condition, the taint and the drain cap against a stand-in Kubernetes API
server the tests start on loopback (``tests/fake_kube_api.py``): what the health loop sends is the
node-status PATCH node-problem-detector sends, and every node it leaves behind validates against the
Kubernetes schemas. The verdicts come from the real ``ccdiag check`` on the bundled samples."""

from __future__ import annotations

import pytest

from ccdiag.health.config import CapConfig, HealthConfig, KubernetesConfig
from ccdiag.health.kube import KubeClient, KubeError, gpu_pods
from ccdiag.health.runner import Runner
from ccdiag.health.state import load_state
from conftest import REPO
from fake_kube_api import TOKEN, FakeApi, gpu_pod, node

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"
NODE = "gpu-node-1"
GPU_LABEL = {"nvidia.com/gpu.present": "true"}
K8S_VERSIONS = ("1.30.0", "1.33.0", "1.37.0")


def test_gpu_pods_are_those_running_or_pending_with_the_gpu_resource():
    pods = [gpu_pod("a", NODE), gpu_pod("b", NODE, phase="Succeeded"), gpu_pod("c", NODE, phase="Pending"),
            gpu_pod("d", NODE, gpus="0"),
            {"metadata": {"name": "e", "namespace": "kube-system"}, "spec": {"containers": [{"name": "x"}]},
             "status": {"phase": "Running"}}]
    assert gpu_pods(pods, "nvidia.com/gpu") == ["team-a/a", "team-a/c"]


def _validate(obj: dict) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for version in K8S_VERSIONS:
        kv.validate(obj, version, strict=True)


def _runner(tmp_path, api: FakeApi, sample, **kw) -> Runner:
    kube = dict(api=api.url)
    kube.update(kw.pop("kube", {}))
    cfg = HealthConfig(state_dir=str(tmp_path / "state"), scheduler="kubernetes", node=NODE, bench=False,
                       gpu_devices=(str(tmp_path / "no-such-dev" / "nvidia[0-9]*"),), check_args=("--replay", str(sample)),
                       kubernetes=KubernetesConfig(**kube), **kw)
    return Runner(cfg, kube=KubeClient(api=api.url, token=TOKEN))


@pytest.fixture
def api():
    with FakeApi() as fake:
        fake.nodes[NODE] = node(NODE, GPU_LABEL, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
        for i in range(2, 11):
            fake.nodes[f"gpu-node-{i}"] = node(f"gpu-node-{i}", GPU_LABEL)
        fake.nodes["cpu-node-1"] = node("cpu-node-1")
        yield fake


@pytest.mark.slow  # starts the stand-in API server and runs the check
def test_a_failure_sets_the_condition_false_with_the_root_cause_and_a_pass_sets_it_true(tmp_path, api):
    result = _runner(tmp_path, api, DEGRADED, kube={"taint": True}).turn()
    assert result.outcome == "fail"
    cond = api.condition(NODE, "CcdiagHealthy")
    assert cond["status"] == "False" and cond["reason"] == "ServiceRequired"  # the degraded sample's top rung
    assert cond["message"].startswith("pcie.link_width GPU3 PCIe link: ") and "(+7 other root causes)" in cond["message"]
    assert api.condition(NODE, "Ready")["reason"] == "KubeletReady"  # the kubelet's conditions are untouched
    taints = api.nodes[NODE]["spec"]["taints"]
    assert taints == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                      {"key": "ccdiag/unhealthy", "value": "service", "effect": "NoSchedule"}]
    # what was sent is node-problem-detector's patch: status.conditions on the status subresource
    (patch,) = [r for r in api.requests if r["path"] == f"/api/v1/nodes/{NODE}/status"]
    assert patch["method"] == "PATCH" and patch["content_type"] == "application/strategic-merge-patch+json"
    assert list(patch["body"]) == ["status"] and [c["type"] for c in patch["body"]["status"]["conditions"]] == ["CcdiagHealthy"]
    _validate(api.nodes[NODE])
    failed_at = cond["lastTransitionTime"]

    result = _runner(tmp_path, api, HEALTHY, kube={"taint": True}).turn(force=True)
    assert result.outcome == "pass"
    cond = api.condition(NODE, "CcdiagHealthy")
    assert cond["status"] == "True" and cond["reason"] == "ChecksPassed" and "holds until" in cond["message"]
    assert cond["lastTransitionTime"] >= failed_at
    assert api.nodes[NODE]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    _validate(api.nodes[NODE])
    again = _runner(tmp_path, api, HEALTHY).turn(force=True)
    assert again.outcome == "pass"
    assert api.condition(NODE, "CcdiagHealthy")["lastTransitionTime"] == cond["lastTransitionTime"]  # status held


@pytest.mark.slow  # starts the stand-in API server and runs the check
def test_above_the_cap_the_condition_is_unknown_and_no_taint_is_set(tmp_path, api):
    for i in (2, 3):
        api.nodes[f"gpu-node-{i}"]["status"]["conditions"].append(
            {"type": "CcdiagHealthy", "status": "False", "reason": "RebootRequired", "message": "xid.recent GPU6",
             "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    runner = _runner(tmp_path, api, DEGRADED, kube={"taint": True}, cap=CapConfig(max_out_fraction=0.2))
    result = runner.turn()
    cond = api.condition(NODE, "CcdiagHealthy")
    assert result.outcome == "fail" and cond["status"] == "Unknown" and cond["reason"] == "DrainCapReached"
    assert "drain cap reached: 2 of 10 nodes" in cond["message"] and cond["message"].startswith("would be False (service)")
    assert api.nodes[NODE]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    st = load_state(runner.cfg.state_path)
    assert st.cap["held"] is True and st.cap["out"] == 2 and st.cap["total"] == 10  # the CPU node is not counted
    assert st.steps["drain"]["held"] == 1
    _validate(api.nodes[NODE])


@pytest.mark.slow  # starts the stand-in API server
def test_a_gpu_pod_on_the_node_makes_it_busy_and_an_expired_pass_turns_unknown(tmp_path, api):
    runner = _runner(tmp_path, api, HEALTHY, validity_s=60.0)
    assert runner.turn().outcome == "pass"
    api.pods.append(gpu_pod("train-0", NODE))
    api.pods.append(gpu_pod("train-1", "gpu-node-2"))
    later = Runner(runner.cfg, kube=runner.kube, clock=lambda: load_state(runner.cfg.state_path).valid_until + 1)
    result = later.turn(force=True)
    assert result.outcome == "busy" and "GPU pod team-a/train-0" in result.detail
    cond = api.condition(NODE, "CcdiagHealthy")
    assert cond["status"] == "Unknown" and cond["reason"] == "VerdictExpired" and "stayed busy" in cond["message"]
    _validate(api.nodes[NODE])


@pytest.mark.slow  # starts the stand-in API server
def test_a_taint_change_is_made_again_on_a_conflict_and_credentials_are_sent(api):
    client = KubeClient(api=api.url, token=TOKEN)
    api.conflicts = 1
    client.set_taints(NODE, lambda ts: ts + [{"key": "ccdiag/unhealthy", "value": "reboot", "effect": "NoSchedule"}])
    assert api.nodes[NODE]["spec"]["taints"][-1]["value"] == "reboot"
    patches = [r for r in api.requests if r["method"] == "PATCH"]
    assert len(patches) == 2 and all(r["content_type"] == "application/merge-patch+json" for r in patches)
    assert patches[1]["body"]["metadata"]["resourceVersion"] != patches[0]["body"]["metadata"]["resourceVersion"]
    with pytest.raises(KubeError) as exc:
        KubeClient(api=api.url, token="wrong").get_node(NODE)
    assert exc.value.status == 401
    with pytest.raises(KubeError) as exc:
        client.get_node("no-such-node")
    assert exc.value.status == 404 and "not found" in str(exc.value)
