"""The few Kubernetes API calls the health loop makes, as plain HTTPS requests from inside its pod.

A node condition is set the way node-problem-detector sets its own: a strategic-merge PATCH of
``status.conditions`` on the node's ``status`` subresource, so the API server merges the list by
condition ``type`` and the kubelet's conditions are never touched. The taint list has no such merge
key on ``spec`` for all server versions, so a taint change reads the node and writes the whole list
back with the ``resourceVersion`` it read (a JSON merge patch the server refuses with 409 when
another writer came first; the change is then made again on the newer node).

Credentials are the pod's service account (token and CA under
``/var/run/secrets/kubernetes.io/serviceaccount``, the server from ``KUBERNETES_SERVICE_HOST``);
``api`` in the health configuration names another server (a test's stand-in on loopback). The RBAC
these calls need is in ``deploy/kubernetes/ccdiag.yaml`` (nodes get/list/patch, nodes/status patch,
pods list). The standard library's HTTP client is enough for five calls; the official client would
add a dozen packages to a node agent.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CALL_TIMEOUT_S = 10.0
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class KubeError(RuntimeError):
    """An API call that failed; ``status`` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class KubeClient:
    def __init__(self, api: str | None = None, token: str | None = None, ca_file: str | None = None,
                 timeout_s: float = CALL_TIMEOUT_S):
        if api is None:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise KubeError("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST unset) and no [kubernetes] api set")
            api = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
            ca_file = ca_file or os.path.join(SERVICE_ACCOUNT, "ca.crt")
        if token is None:
            try:
                with open(os.path.join(SERVICE_ACCOUNT, "token"), encoding="utf-8") as fh:
                    token = fh.read().strip()
            except OSError:
                token = None
        self.api = api.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.context = ssl.create_default_context(cafile=ca_file) if self.api.startswith("https:") else None

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.context) as resp:
                text = resp.read(32 << 20)
        except urllib.error.HTTPError as exc:
            detail = ""
            try:
                detail = json.loads(exc.read(64 << 10)).get("message", "")
            except (ValueError, AttributeError, OSError):
                pass
            raise KubeError(f"{method} {path}: HTTP {exc.code} {detail}".strip(), exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise KubeError(f"{method} {path}: {getattr(exc, 'reason', exc)}") from None
        try:
            return json.loads(text) if text else {}
        except ValueError:
            raise KubeError(f"{method} {path}: the answer is not JSON") from None

    # -- nodes --------------------------------------------------------------------------------------
    def get_node(self, name: str) -> dict:
        return self.request("GET", f"/api/v1/nodes/{urllib.parse.quote(name)}")

    def list_nodes(self, label_selector: str | None = None) -> list[dict]:
        query = f"?labelSelector={urllib.parse.quote(label_selector)}" if label_selector else ""
        return list(self.request("GET", f"/api/v1/nodes{query}").get("items") or [])

    def patch_conditions(self, name: str, conditions: list[dict]) -> dict:
        """Set ``conditions`` on the node's status, merged by type (node-problem-detector's patch)."""
        return self.request("PATCH", f"/api/v1/nodes/{urllib.parse.quote(name)}/status",
                            {"status": {"conditions": conditions}}, STRATEGIC)

    def set_taints(self, name: str, change, attempts: int = 3) -> dict:
        """Apply ``change(taints) -> taints`` to the node's taint list, retrying on a conflict."""
        last: KubeError | None = None
        for _ in range(attempts):
            node = self.get_node(name)
            taints = list((node.get("spec") or {}).get("taints") or [])
            wanted = change(taints)
            if wanted == taints:
                return node
            body = {"metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")},
                    "spec": {"taints": wanted or None}}
            try:
                return self.request("PATCH", f"/api/v1/nodes/{urllib.parse.quote(name)}", body, MERGE)
            except KubeError as exc:
                if exc.status != 409:
                    raise
                last = exc
        raise last or KubeError(f"taints of {name}: conflicting writers")

    # -- pods ---------------------------------------------------------------------------------------
    def pods_on_node(self, name: str) -> list[dict]:
        selector = urllib.parse.quote(f"spec.nodeName={name}")
        return list(self.request("GET", f"/api/v1/pods?fieldSelector={selector}").get("items") or [])


def gpu_pods(pods: list[dict], resource: str) -> list[str]:
    """``namespace/name`` of the pods that hold (Running) or are about to hold (Pending) ``resource``."""
    out = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") not in ("Running", "Pending"):
            continue
        spec = pod.get("spec") or {}
        for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
            res = c.get("resources") or {}
            amounts = [(res.get(k) or {}).get(resource) for k in ("limits", "requests")]
            if any(a not in (None, "0", 0) for a in amounts):
                meta = pod.get("metadata") or {}
                out.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
                break
    return out


__all__ = ["KubeClient", "KubeError", "gpu_pods"]
