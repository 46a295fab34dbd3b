"""The container build file and the Kubernetes manifests: valid against the Kubernetes schemas
(kubernetes-validate ships them, offline), consistent with each other and with ccdiag itself.

The ServiceMonitor is a custom resource, absent from the Kubernetes schemas. Its shape is checked
against the facts of the prometheus-operator CRD (operator 0.84.1,
prometheus-operator/prometheus-operator example/prometheus-operator-crd/
monitoring.coreos.com_servicemonitors.yaml @ 01b1a0ea): spec is required; spec.selector and
spec.endpoints are required; an endpoint's port is a string naming a Service port, its interval
and scrapeTimeout are Prometheus durations. The CRD itself is not copied here: only those facts,
written as the small schema below.
"""

from __future__ import annotations

import re
import subprocess
import sys

import jsonschema
import pytest

from conftest import REPO

yaml = pytest.importorskip("yaml")

MANIFEST = REPO / "deploy" / "kubernetes" / "ccdiag.yaml"
CONTAINERFILE = REPO / "Containerfile"
K8S_VERSION = "1.30.0"
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
SERVICEMONITOR_SHAPE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "spec": {
            "type": "object",
            "required": ["endpoints", "selector"],
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {"type": "object", "properties": {"matchLabels": {
                    "type": "object", "additionalProperties": {"type": "string"}}}},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                                   "interval": {"type": "string", "pattern": DURATION},
                                   "scrapeTimeout": {"type": "string", "pattern": DURATION}}}},
            },
        },
    },
}


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def test_core_objects_validate_against_the_kubernetes_schemas(docs):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (in the test extra)")
    for kind in ("Namespace", "DaemonSet", "Service"):
        kv.validate(docs[kind], K8S_VERSION, strict=True)  # raises on any unknown or mistyped field


def test_a_mistake_is_caught_by_that_validation(docs):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (in the test extra)")
    import copy

    broken = copy.deepcopy(docs["DaemonSet"])
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9643"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, K8S_VERSION, strict=True)


def test_servicemonitor_has_the_operator_crd_shape(docs):
    jsonschema.validate(docs["ServiceMonitor"], SERVICEMONITOR_SHAPE)


def test_the_pieces_join(docs):
    ds, svc, sm = docs["DaemonSet"], docs["Service"], docs["ServiceMonitor"]
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pod["runtimeClassName"] == "nvidia"
    # the host's /sys, /proc and /dev/kmsg, each read-only
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert {host[n] for n in host} == {"/sys", "/proc", "/dev/kmsg"}
    assert all(mounts[n]["readOnly"] for n in host) and all(m.get("readOnly") for m in container["volumeMounts"]
                                                           if m["name"] in host)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "privileged" not in container["securityContext"]
    # one port, 9643, from the daemon's listen address to the scrape
    port = container["ports"][0]
    assert port["containerPort"] == 9643 and "0.0.0.0:9643" in container["args"]
    assert svc["spec"]["ports"][0]["port"] == 9643 and svc["spec"]["ports"][0]["targetPort"] == port["name"]
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    # selectors match what they select
    assert svc["spec"]["selector"].items() <= labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    # the alert rules' CcdiagExporterDown matches up{job="ccdiag"}: the job label comes from the Service
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "ccdiag"


@pytest.mark.slow  # a child process per case (the fast loop leaves it to CI)
def test_the_daemonset_and_image_arguments_are_ones_ccdiag_accepts(docs, tmp_path):
    """Run exactly those arguments, for one cycle against the degraded sample."""
    args = docs["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
    cmd = re.search(r'^CMD (\[.*\])$', CONTAINERFILE.read_text(), re.M)
    import json

    for argv in (args, json.loads(cmd.group(1))):
        proc = subprocess.run([sys.executable, "-m", "ccdiag", *argv, "--once", "--replay",
                               str(REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "ccdiag_gpu_up" in proc.stdout


def test_containerfile_exposes_the_port_and_installs_the_daemon_extra():
    text = CONTAINERFILE.read_text()
    assert re.search(r"^FROM \S+python:3\.1[0-3]", text, re.M)  # a supported Python
    assert re.search(r"^EXPOSE 9643$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["ccdiag"\]$', text, re.M)
    assert "[daemon]" in text
    # every documented example run of the image names a command that exists
    for line in re.findall(r"^#\s+podman run .*? (\w+) --", text, re.M):
        assert subprocess.run([sys.executable, "-m", "ccdiag", line, "--help"], capture_output=True,
                              timeout=60).returncode == 0
