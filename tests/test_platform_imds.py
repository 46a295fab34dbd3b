"""The instance type where only a cloud's metadata service has it (Azure, Google, Oracle).

The door asks the service only when DMI names that cloud, at the link-local address, bounded to about a
second, once per process; a snapshot records the answer and replays it; ``--root`` and ``--replay`` never
ask. ``instance_type_source`` says where the type came from (``dmi``, ``imds``, ``unknown``).

Data: the answers' formats and the example type names are the vendors' documentation (ccdiag/host/imds.py
cites each page): Azure ``vmSize`` "Standard_ND96isr_H100_v5", Google ``machine-type``
"projects/PROJECT_NUM/machineTypes/a3-megagpu-8g" (the project number below is MADE UP), Oracle
``shape`` "BM.GPU.H100.8". The services themselves are stood in for by a local HTTP server (SYNTHESIZED
answers in those formats); the snapshot is the bundled healthy sample (itself SYNTHESIZED) with Azure's
documented DMI strings ADDED HERE.
"""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from ccdiag.probes import platform as P
from ccdiag.host import imds
from ccdiag.host.door import HostReadError, LiveHost, RecordingHost, ReplayHost
from ccdiag.host.snapshot import SnapshotData, SnapshotError
from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
ANSWERS = {"azure": "Standard_ND96isr_H100_v5", "gcp": "projects/123456789012/machineTypes/a3-megagpu-8g",
           "oci": "BM.GPU.H100.8"}
#: what the vendors document, kept apart from the module's table so a test can change the request
DOCUMENTED = dict(imds.ENDPOINTS)
AZURE_DMI = {"/sys/class/dmi/id/sys_vendor": "Microsoft Corporation\n",
             "/sys/class/dmi/id/product_name": "Virtual Machine\n",
             "/sys/class/dmi/id/chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77\n"}


@pytest.mark.parametrize("provider, expected", [("azure", "Standard_ND96isr_H100_v5"), ("gcp", "a3-megagpu-8g"),
                                                ("oci", "BM.GPU.H100.8")])
def test_the_answer_of_each_service_gives_the_instance_type(provider, expected):
    assert P.instance_type_from_imds(provider, ANSWERS[provider] + "\n") == expected


@pytest.mark.parametrize("provider, text", [("gcp", "a3-megagpu-8g"), ("azure", "<html>error</html>"),
                                            ("oci", ""), ("aws", "p5.48xlarge")])
def test_an_answer_that_is_not_an_instance_type_is_refused(provider, text):
    assert P.instance_type_from_imds(provider, text) is None


class _Service(http.server.BaseHTTPRequestHandler):
    """A stand-in metadata service: the documented path and header give the answer, anything else 400/404."""

    def do_GET(self):  # noqa: N802 - the http.server protocol
        for provider, (path, headers) in DOCUMENTED.items():
            if self.path == path:
                if all(self.headers.get(k) == v for k, v in headers):
                    body = ANSWERS[provider].encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_error(400)
                return
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def service(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(imds, "ADDRESS", "127.0.0.1")
    monkeypatch.setattr(imds, "PORT", server.server_address[1])
    monkeypatch.setattr(imds, "_CACHE", {})
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("provider", sorted(imds.ENDPOINTS))
def test_the_live_door_asks_with_the_documented_path_and_header(service, provider):
    assert LiveHost("/").cloud_metadata(provider) == ANSWERS[provider]


def test_a_wrong_header_or_path_is_an_error_naming_the_status(service, monkeypatch):
    monkeypatch.setitem(imds.ENDPOINTS, "azure", (imds.ENDPOINTS["azure"][0], (("Metadata", "false"),)))
    with pytest.raises(HostReadError, match="HTTP 400"):
        LiveHost("/").cloud_metadata("azure")


def test_a_service_that_never_answers_is_bounded_and_remembered(monkeypatch):
    """Accepts the connection and says nothing: an error naming the bound, then the same error from the
    cache without a second wait (the exporter asks at every scrape)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    monkeypatch.setattr(imds, "ADDRESS", "127.0.0.1")
    monkeypatch.setattr(imds, "PORT", silent.getsockname()[1])
    monkeypatch.setattr(imds, "_CACHE", {})
    try:
        with pytest.raises(HostReadError, match="no answer from the oci instance metadata service .* within 1s"):
            LiveHost("/").cloud_metadata("oci")
        monkeypatch.setattr(imds, "_get", lambda provider: pytest.fail("asked twice"))
        with pytest.raises(HostReadError, match="within 1s"):
            LiveHost("/").cloud_metadata("oci")
    finally:
        silent.close()


def _no_network(monkeypatch):
    monkeypatch.setattr(imds, "fetch", lambda provider: pytest.fail(f"the {provider} service was asked"))


def test_a_node_whose_dmi_names_no_such_cloud_never_asks(monkeypatch):
    _no_network(monkeypatch)
    obs = P.collect(ReplayHost(str(HEALTHY)))
    assert (obs.provider, obs.instance_type, obs.instance_type_source, obs.instance_type_error) == \
        (None, None, "unknown", None)


def test_under_a_root_nothing_is_asked_and_the_type_says_why_it_is_unknown(tmp_path, monkeypatch):
    _no_network(monkeypatch)
    for rel, text in AZURE_DMI.items():
        (tmp_path / rel.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel.lstrip("/")).write_text(text)
    obs = P.collect(LiveHost(root=str(tmp_path)))
    assert (obs.provider, obs.instance_type, obs.instance_type_source) == ("azure", None, "unknown")
    assert "--root" in obs.instance_type_error


def test_aws_keeps_the_type_dmi_gives_without_asking(tmp_path, monkeypatch):
    _no_network(monkeypatch)
    for rel, text in {"/sys/class/dmi/id/sys_vendor": "Amazon EC2\n", "/sys/class/dmi/id/product_name": "p5.48xlarge\n"}.items():
        (tmp_path / rel.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel.lstrip("/")).write_text(text)
    obs = P.collect(LiveHost(root=str(tmp_path)))
    assert (obs.instance_type, obs.instance_type_source) == ("p5.48xlarge", "dmi")


def _azure_snapshot(imds_records: dict | None) -> SnapshotData:
    snap = SnapshotData.load(str(HEALTHY))
    for path, text in AZURE_DMI.items():
        snap.put_file(path, text)
    snap.imds = dict(imds_records or {})
    return SnapshotData.from_bytes(snap.to_bytes())


def test_a_recorded_answer_replays_without_the_network(service, monkeypatch):
    rec = RecordingHost("/")
    assert rec.cloud_metadata("azure") == ANSWERS["azure"]
    recorded = SnapshotData.from_bytes(rec.snapshot().to_bytes()).imds
    assert recorded == {"azure": {"text": ANSWERS["azure"]}}
    _no_network(monkeypatch)
    obs = P.collect(ReplayHost(_azure_snapshot(recorded)))
    assert (obs.provider, obs.instance_type, obs.instance_type_source) == ("azure", "Standard_ND96isr_H100_v5", "imds")


def test_a_recorded_failure_and_an_older_snapshot_say_unknown_with_why(monkeypatch):
    _no_network(monkeypatch)
    failed = {"azure": {"error": {"kind": "io", "errno": None, "message": "no answer within 1s"}}}
    obs = P.collect(ReplayHost(_azure_snapshot(failed)))
    assert (obs.instance_type, obs.instance_type_source) == (None, "unknown")
    assert "no answer within 1s" in obs.instance_type_error
    obs = P.collect(ReplayHost(_azure_snapshot(None)))
    assert obs.instance_type_source == "unknown" and "not in snapshot" in obs.instance_type_error


def test_a_snapshot_without_an_answer_keeps_its_bytes():
    """Only a snapshot that asked carries the section: the bundled samples stay byte-identical."""
    assert b'"imds"' not in SnapshotData.load(str(HEALTHY)).to_bytes()


def test_a_malformed_answer_record_is_refused_naming_it():
    snap = _azure_snapshot({"azure": {"text": ANSWERS["azure"]}})
    snap.imds = {"azure": {"txt": 1}}
    with pytest.raises(SnapshotError, match="imds.azure"):
        SnapshotData.from_bytes(snap.to_bytes())


def test_redaction_keeps_the_type_and_drops_googles_project_number():
    from ccdiag.report.redact import redact

    snap = _azure_snapshot({"gcp": {"text": ANSWERS["gcp"]}})
    out, _ = redact(snap)
    assert out.imds["gcp"]["text"] == "projects/REDACTED/machineTypes/a3-megagpu-8g"
    assert P.instance_type_from_imds("gcp", out.imds["gcp"]["text"]) == "a3-megagpu-8g"


def test_the_recommendation_names_the_instance_type_and_its_source(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from ccdiag.commands.cli import cli

    _no_network(monkeypatch)
    target = tmp_path / "azure.snap.tar.gz"
    _azure_snapshot({"azure": {"text": ANSWERS["azure"]}}).save(str(target))
    r = CliRunner().invoke(cli, ["nccl", "--replay", str(target), "--json"])
    notes = json.loads(r.output)["nccl"]["notes"]
    assert any("Azure ND" in n and "(Standard_ND96isr_H100_v5, from imds)" in n for n in notes), notes
