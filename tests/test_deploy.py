"""The container build file and the Kubernetes manifests: valid against the Kubernetes schemas
(kubernetes-validate ships them, offline) of several releases, the ServiceMonitor against the
Prometheus Operator's own CRD, consistent with each other and with ccdiag itself.

The ServiceMonitor is a custom resource, absent from the Kubernetes schemas: its CRD (operator
v0.93.1, as kube-prometheus-stack 88.5.3 ships it) is vendored with its source in
``tests/fixtures/k8s/``, and the manifest is validated against its openAPIV3Schema with unknown
fields refused (the API server prunes or, with strict field validation, rejects them).
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import jsonschema
import pytest

from conftest import REPO

yaml = pytest.importorskip("yaml")

MANIFEST = REPO / "deploy" / "kubernetes" / "ccdiag.yaml"
NONROOT_PATCH = REPO / "deploy" / "kubernetes" / "nonroot-patch.yaml"
CONTAINERFILE = REPO / "Containerfile"
SERVICEMONITOR_CRD = REPO / "tests" / "fixtures" / "k8s" / "servicemonitors-crd-v0.93.1.yaml"
#: the oldest release the major clouds still run, one between, and the newest schemas shipped
K8S_VERSIONS = ("1.30.0", "1.33.0", "1.37.0")
KINDS = ("Namespace", "ResourceQuota", "DaemonSet", "Service", "ServiceMonitor")


def _kv():
    return pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (in the test extra)")


def _strict(schema):
    """The CRD schema with unknown fields refused: every object that lists its properties and does
    not ask to keep unknown fields gets ``additionalProperties: false``."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def crd() -> dict:
    return yaml.safe_load(SERVICEMONITOR_CRD.read_text())


@pytest.fixture(scope="module")
def servicemonitor_schema(crd) -> dict:
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return _strict(version["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def test_the_manifest_holds_each_object_once(docs):
    kinds = [d["kind"] for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert sorted(kinds) == sorted(KINDS)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_objects_validate_against_the_kubernetes_schemas(docs, version):
    kv = _kv()
    for kind in KINDS:
        if kind != "ServiceMonitor":
            kv.validate(docs[kind], version, strict=True)  # raises on any unknown or mistyped field


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_a_mistake_is_caught_by_that_validation(docs, version):
    kv = _kv()
    broken = copy.deepcopy(docs["DaemonSet"])
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9643"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, version, strict=True)
    quota = copy.deepcopy(docs["ResourceQuota"])
    quota["spec"]["scopeSelector"]["matchExpressions"][0]["scope"] = "PriorityClass"  # not the field's name
    with pytest.raises(kv.ValidationError):
        kv.validate(quota, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_vendored_crd_is_a_valid_custom_resource_definition(crd, version):
    _kv().validate(crd, version, strict=True)
    assert crd["spec"]["group"] == "monitoring.coreos.com" and crd["spec"]["names"]["kind"] == "ServiceMonitor"
    assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == "0.93.1"


def test_servicemonitor_validates_against_the_operator_crd(docs, servicemonitor_schema):
    jsonschema.validate(docs["ServiceMonitor"], servicemonitor_schema)
    # its metadata is ObjectMeta: checked by the Kubernetes schemas, on an object that has one
    kv = _kv()
    for version in K8S_VERSIONS:
        kv.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": docs["ServiceMonitor"]["metadata"]},
                    version, strict=True)


def test_the_crd_schema_catches_a_mistake(docs, servicemonitor_schema):
    for path, value in ((("spec", "endpoints", 0, "interval"), "15 seconds"),   # not a duration
                        (("spec", "endpoints", 0, "scrape_timeout"), "10s"),    # unknown field
                        (("spec", "jobLabel"), 7)):
        broken = copy.deepcopy(docs["ServiceMonitor"])
        node = broken
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, servicemonitor_schema)


def test_kube_prometheus_stack_selects_the_servicemonitor(docs):
    """The chart's Prometheus selects ServiceMonitors by ``release: <Helm release>`` unless told
    otherwise; the label is there, and the docs show how to match another release."""
    labels = docs["ServiceMonitor"]["metadata"]["labels"]
    assert labels["release"] == "kube-prometheus-stack"
    text = (REPO / "docs" / "kubernetes.md").read_text()
    assert "serviceMonitorSelectorNilUsesHelmValues" in text
    assert "kubectl -n ccdiag label servicemonitor ccdiag release=" in text


def test_the_quota_admits_the_daemonsets_priority_class(docs):
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    quota = docs["ResourceQuota"]
    assert quota["metadata"]["namespace"] == docs["DaemonSet"]["metadata"]["namespace"]
    (expr,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expr["scopeName"] == "PriorityClass" and expr["operator"] == "In"
    assert pod["priorityClassName"] in expr["values"]
    assert int(quota["spec"]["hard"]["pods"]) >= 1000  # one pod per GPU node: never the limit


def test_the_namespace_allows_host_paths_and_the_host_network(docs):
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and any("hostPath" in v for v in pod["volumes"])
    assert docs["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def _strategic_merge(base, patch):
    """What ``kubectl patch`` (strategic merge) does with this patch: maps merge, the containers
    list merges by name, any other list is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if k == "containers":
                by_name = {c["name"]: c for c in base.get(k, [])}
                out[k] = [_strategic_merge(by_name.get(c["name"], {}), c) for c in v] + \
                         [c for c in base.get(k, []) if c["name"] not in {p["name"] for p in v}]
            else:
                out[k] = _strategic_merge(base.get(k), v) if k in base else v
        return out
    return patch


def test_the_container_holds_one_capability_and_the_nonroot_patch_none(docs):
    kv = _kv()
    ds = docs["DaemonSet"]
    sec = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sec["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]} and sec["runAsUser"] == 0
    assert sec["allowPrivilegeEscalation"] is False and sec["readOnlyRootFilesystem"] is True
    assert "privileged" not in sec
    assert ds["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    patched = _strategic_merge(ds, yaml.safe_load(NONROOT_PATCH.read_text()))
    for version in K8S_VERSIONS:
        kv.validate(patched, version, strict=True)
    pod = patched["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["runAsUser"] == pod["securityContext"]["runAsUser"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": []}
    assert container["image"] == ds["spec"]["template"]["spec"]["containers"][0]["image"]  # merged, not replaced


def test_the_docs_name_what_each_probe_needs():
    from ccdiag.probes.registry import ALL_PROBES

    text = (REPO / "docs" / "kubernetes.md").read_text()
    table = text[text.index("## Privileges, probe by probe"):text.index("## No Helm chart")]
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z_]+)` \|", table, re.M)}
    assert rows == set(ALL_PROBES)
    assert "CAP_SYSLOG" in table and "CAP_SYS_ADMIN" in table


def test_the_pieces_join(docs):
    ds, svc, sm = docs["DaemonSet"], docs["Service"], docs["ServiceMonitor"]
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pod["runtimeClassName"] == "nvidia"  # an assumption the docs state, with what to do otherwise
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
