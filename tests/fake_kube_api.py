"""A stand-in for the Kubernetes API server, on loopback, for the health loop's node calls.

It answers the calls ``ccdiag/health/kube.py`` makes the way the API server does: nodes and pods as
``v1`` lists and objects, a ``Status`` object with the HTTP code on an error, a strategic-merge
PATCH of ``status.conditions`` on the ``nodes/<name>/status`` subresource merged by condition
``type`` (the patch strategy ``NodeStatus.conditions`` declares: ``patchMergeKey: type``), a JSON
merge patch of the node itself that replaces the taint list and is refused with ``409 Conflict`` when
its ``metadata.resourceVersion`` is not the node's. Every request is recorded (method, path, content
type, body) so a test can assert what was sent; the node objects are what ``kubectl get node -o
json`` would show, and the tests validate them against the Kubernetes schemas. Only a request with
the expected bearer token is served (401 otherwise).
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "stand-in-service-account-token"


def node(name: str, labels: dict | None = None, conditions: list | None = None, taints: list | None = None) -> dict:
    """A Node as a kubelet registers it (the Ready condition is the kubelet's)."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         "resourceVersion": "1"},
            "spec": {"taints": taints} if taints else {},
            "status": {"conditions": conditions if conditions is not None else [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def gpu_pod(name: str, node_name: str, phase: str = "Running", gpus: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "train", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": phase}}


class FakeApi:
    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.pods: list[dict] = []
        self.requests: list[dict] = []
        self.conflicts = 0  # answer this many node PATCHes with 409 before accepting one
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FakeApi":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def condition(self, name: str, kind: str) -> dict | None:
        for c in self.nodes[name]["status"].get("conditions") or []:
            if c["type"] == kind:
                return c
        return None

    # -- the server ------------------------------------------------------------------------------------
    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, "code": code})

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urllib.parse.urlsplit(self.path)
                record = {"method": method, "path": url.path, "query": urllib.parse.parse_qs(url.query),
                          "content_type": self.headers.get("Content-Type"), "body": json.loads(raw) if raw else None}
                with api._lock:
                    api.requests.append(record)
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._status(401, "Unauthorized", "Unauthorized")
                parts = url.path.strip("/").split("/")
                with api._lock:
                    if parts[:2] != ["api", "v1"]:
                        return self._status(404, "NotFound", "the server could not find the requested resource")
                    if parts[2:] == ["nodes"] and method == "GET":
                        return self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                                                "items": api._select(record["query"])})
                    if parts[2:3] == ["pods"] and method == "GET":
                        return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                                "items": api._pods(record["query"])})
                    if parts[2:3] == ["nodes"] and len(parts) >= 4:
                        name = parts[3]
                        if name not in api.nodes:
                            return self._status(404, "NotFound", f'nodes "{name}" not found')
                        if method == "GET" and len(parts) == 4:
                            return self._send(200, api.nodes[name])
                        if method == "PATCH" and parts[4:] == ["status"]:
                            return api._patch_status(self, name, record)
                        if method == "PATCH" and len(parts) == 4:
                            return api._patch_node(self, name, record)
                return self._status(405, "MethodNotAllowed", f"{method} {url.path}")

            def do_GET(self) -> None:
                self._serve("GET")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

        return Handler

    def _select(self, query: dict) -> list[dict]:
        items = list(self.nodes.values())
        for sel in query.get("labelSelector", []):
            for term in sel.split(","):
                key, _, value = term.partition("=")
                items = [n for n in items if n["metadata"]["labels"].get(key) == value]
        return copy.deepcopy(items)

    def _pods(self, query: dict) -> list[dict]:
        pods = self.pods
        for sel in query.get("fieldSelector", []):
            key, _, value = sel.partition("=")
            if key == "spec.nodeName":
                pods = [p for p in pods if p["spec"].get("nodeName") == value]
        return copy.deepcopy(pods)

    def _bump(self, name: str) -> None:
        meta = self.nodes[name]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def _patch_status(self, handler, name: str, record: dict) -> None:
        if record["content_type"] != "application/strategic-merge-patch+json":
            return handler._status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                                                                f"{record['content_type']}")
        body = record["body"] or {}
        if set(body) != {"status"} or set(body["status"]) != {"conditions"}:
            return handler._status(422, "Invalid", "this stand-in expects a patch of status.conditions only")
        conds = self.nodes[name]["status"].setdefault("conditions", [])
        for new in body["status"]["conditions"]:
            for i, old in enumerate(conds):
                if old["type"] == new["type"]:
                    conds[i] = {**old, **new}
                    break
            else:
                conds.append(new)
        self._bump(name)
        handler._send(200, self.nodes[name])

    def _patch_node(self, handler, name: str, record: dict) -> None:
        if record["content_type"] != "application/merge-patch+json":
            return handler._status(415, "UnsupportedMediaType", f"unexpected {record['content_type']}")
        body = record["body"] or {}
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if self.conflicts > 0 or (want_rv is not None and want_rv != self.nodes[name]["metadata"]["resourceVersion"]):
            self.conflicts = max(0, self.conflicts - 1)
            self._bump(name)  # another writer came first
            return handler._status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has '
                                                    f"been modified; please apply your changes to the latest version")
        spec = body.get("spec") or {}
        if "taints" in spec:
            if spec["taints"] is None:
                self.nodes[name]["spec"].pop("taints", None)
            else:
                self.nodes[name]["spec"]["taints"] = spec["taints"]
        self._bump(name)
        handler._send(200, self.nodes[name])
