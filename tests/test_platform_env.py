"""The libfabric variables AWS requires (``FI_*``, ``RDMAV_FORK_SAFE``) read through the host door.

Live, the door records them with the NCCL ones, a snapshot keeps them and says which prefixes it
recorded (``meta.environ_recorded``), and ``ccdiag nccl`` judges them on replay. A snapshot from before
(no ``environ_recorded``) cannot tell "not set" from "not recorded": those settings are UNKNOWN, never
"not set" and never "kept". Under ``--root`` the process environment is never the tree's.

Data: the bundled healthy sample (SYNTHESIZED, samples/README.md) made into an AWS node HERE by adding
the DMI strings AWS documents for its Nitro instances (``sys_vendor`` "Amazon EC2", the instance type
as ``product_name``: the facts :mod:`probes.platform` cites) and a job environment; nothing else changed.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ccdiag.commands.cli import cli
from ccdiag.host.door import LEGACY_ENV_PREFIXES, LiveHost, RecordingHost, ReplayHost, environ_recorded
from ccdiag.nccl.present import settings_present, unread_prefixes
from ccdiag.host.snapshot import SnapshotData, SnapshotError
from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1", "NCCL_PROTO": "simple"}


def _aws_snapshot(path, environ: dict, recorded: list | None) -> str:
    """The healthy sample as a p5.48xlarge (DMI ADDED HERE) with ``environ``; ``recorded`` None: an older
    snapshot's metadata (no ``environ_recorded``)."""
    snap = SnapshotData.load(str(HEALTHY))
    snap.put_file("/sys/class/dmi/id/sys_vendor", "Amazon EC2\n")
    snap.put_file("/sys/class/dmi/id/bios_vendor", "Amazon EC2\n")
    snap.put_file("/sys/class/dmi/id/product_name", "p5.48xlarge\n")
    snap.environ = dict(environ)
    snap.meta.pop("environ_recorded", None)
    if recorded is not None:
        snap.meta["environ_recorded"] = recorded
    snap.save(str(path))
    return str(path)


def _knobs(snapshot: str) -> dict:
    r = CliRunner().invoke(cli, ["nccl", "--replay", snapshot, "--json"])
    assert r.exit_code == 0, r.output
    return {k["name"]: k for k in json.loads(r.output)["nccl"]["knobs"]}


def test_the_live_door_records_libfabric_variables_and_says_so(monkeypatch):
    monkeypatch.setenv("FI_PROVIDER", "efa")
    monkeypatch.setenv("RDMAV_FORK_SAFE", "1")
    monkeypatch.setenv("HOME_NOT_RECORDED", "x")
    env = LiveHost("/").environ()
    assert env["FI_PROVIDER"] == "efa" and env["RDMAV_FORK_SAFE"] == "1" and "HOME_NOT_RECORDED" not in env
    assert "FI_" in environ_recorded(LiveHost("/").meta())
    rec = RecordingHost("/")
    rec.environ()
    snap = SnapshotData.from_bytes(rec.snapshot().to_bytes())
    replay = ReplayHost(snap)
    assert replay.environ()["FI_PROVIDER"] == "efa"
    assert unread_prefixes(environ_recorded(replay.meta())) == ()


def test_under_a_root_the_process_environment_is_not_the_trees(tmp_path, monkeypatch):
    monkeypatch.setenv("FI_PROVIDER", "efa")
    host = LiveHost(str(tmp_path))
    assert host.environ() == {}
    # nothing of the environment was read, so no judged variable's absence means "not set"
    assert set(unread_prefixes(environ_recorded(host.meta()))) == {"NCCL_", "FI_", "RDMAV_FORK_SAFE"}


def test_an_older_snapshot_recorded_the_legacy_prefixes():
    assert environ_recorded({}) == LEGACY_ENV_PREFIXES
    assert unread_prefixes(LEGACY_ENV_PREFIXES) == ("FI_", "RDMAV_FORK_SAFE")


def test_settings_present_keeps_libfabric_variables_and_the_environment_wins():
    env, source = settings_present({**EFA_ENV, "PATH": "/bin"}, "FI_PROVIDER=tcp\nNCCL_DEBUG=WARN\n")
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_DEBUG"] == "WARN" and "PATH" not in env
    assert source == "environment and /etc/nccl.conf"


def test_a_new_snapshot_judges_the_efa_settings_it_recorded(tmp_path):
    knobs = _knobs(_aws_snapshot(tmp_path / "new.snap.tar.gz", EFA_ENV, list(EFA_ENV) + ["NCCL_"]))
    for name in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE"):
        assert knobs[name]["action"] == "set" and knobs[name]["value"] == EFA_ENV[name]
        assert "kept as set" in knobs[name]["reason"] and "UNKNOWN" not in knobs[name]["reason"]


def test_a_new_snapshot_without_the_settings_says_to_set_them(tmp_path):
    from ccdiag.host.door import RECORDED_ENV_PREFIXES

    knobs = _knobs(_aws_snapshot(tmp_path / "bare.snap.tar.gz", {}, list(RECORDED_ENV_PREFIXES)))
    assert "not set here: set FI_PROVIDER=efa" in knobs["FI_PROVIDER"]["reason"]
    assert "not set here: set RDMAV_FORK_SAFE=1" in knobs["RDMAV_FORK_SAFE"]["reason"]


def test_an_older_snapshot_says_unknown_for_what_it_did_not_record(tmp_path):
    """Recorded before FI_* was kept: FI_PROVIDER may well be set on the node. The NCCL variable it did
    record is still judged."""
    knobs = _knobs(_aws_snapshot(tmp_path / "old.snap.tar.gz", {"NCCL_PROTO": "simple"}, None))
    for name in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE"):
        k = knobs[name]
        assert k["reason"].count("UNKNOWN whether it is set here") == 1 and "--env-file" in k["reason"]
        assert "not set here" not in k["reason"] and "kept as set" not in k["reason"]
        assert k["details"]["present"] == "unknown" and k["confidence"] == "low"
    assert "kept as set" in knobs["NCCL_PROTO"]["reason"]


def test_an_env_file_settles_what_an_older_snapshot_did_not_record(tmp_path):
    snap = _aws_snapshot(tmp_path / "old.snap.tar.gz", {}, None)
    env_file = tmp_path / "job.env"
    env_file.write_text("FI_PROVIDER=efa\n")
    r = CliRunner().invoke(cli, ["nccl", "--replay", snap, "--env-file", str(env_file), "--json"])
    knobs = {k["name"]: k for k in json.loads(r.output)["nccl"]["knobs"]}
    assert "kept as set" in knobs["FI_PROVIDER"]["reason"]
    assert "not set here: set FI_EFA_USE_DEVICE_RDMA=1" in knobs["FI_EFA_USE_DEVICE_RDMA"]["reason"]


def test_a_malformed_environ_recorded_is_refused_naming_the_field(tmp_path):
    path = _aws_snapshot(tmp_path / "bad.snap.tar.gz", {}, ["FI_"])
    snap = SnapshotData.load(path)
    snap.meta["environ_recorded"] = "FI_"
    snap.save(path)
    with pytest.raises(SnapshotError, match="environ_recorded"):
        SnapshotData.load(path)


# -- the env file and nccl.conf written for the providers' own setups are correct shell and valid nccl.conf ----
def test_env_and_conf_outputs_read_back_to_the_settings(tmp_path):
    """Each provider setup of tests/fixtures/nccl-platforms judged on its instance type, written as an env file
    and as nccl.conf: ``bash -n`` accepts every env file, ``env -i bash -c 'set -a; . file; env'`` gives back
    exactly the recommended settings (``${NCCL_LIB_DIR}`` expanded from the file that defined it; a value with
    quotes and spaces kept as it is, and its reference to a variable no file defines, ``$HOME``, left to
    expand when the job sources it, as the original file would), no variable is written twice, and NCCL's own
    nccl.conf reading gives back the same values (SYNTHESIZED: the last case's awkward value)."""
    import subprocess

    from ccdiag.nccl import render
    from ccdiag.probes._ncclconf import parse_nccl_conf
    from test_platform import _env, _obs, _rec

    cases = [("gcp-a3-mega-tcpxo.env", _obs(provider="gcp", instance_type="a3-megagpu-8g", instance_type_source="imds")),
             ("gcp-a3-high-tcpx.env", _obs(provider="gcp", instance_type="a3-highgpu-8g", instance_type_source="imds")),
             ("azure-ndv5-nccl.conf", _obs(provider="azure", instance_type="Standard_ND96isr_H100_v5")),
             ("oci-bm-gpu-h100-8-nccl.conf", _obs(provider="oci", instance_type="BM.GPU.H100.8")),
             ("aws-p4d-efa.env", _obs(provider="aws", instance_type="p4d.24xlarge"))]
    recs = {name: _rec(obs, _env(name)) for name, obs in cases}
    odd = {"NCCL_TUNER_CONFIG_PATH": "/opt/it's a \"dir\"/$HOME/x", "NCCL_SOCKET_IFNAME": "eth0"}
    recs["awkward"] = _rec(_obs(provider="gcp", instance_type="a3-megagpu-8g", instance_type_source="imds"),
                           {**_env("gcp-a3-mega-tcpxo.env"), **odd})
    script = []
    for name, rec in recs.items():
        env_path, conf_path = tmp_path / f"{name}.env", tmp_path / f"{name}.conf"
        env_path.write_text(render.env_file(rec, f"settings for {name}"))
        conf_path.write_text(render.nccl_conf(rec, f"settings for {name}"))
        exports = [l.split("=", 1)[0].lstrip("# ").removeprefix("export ").strip()
                   for l in env_path.read_text().splitlines() if l.lstrip("# ").startswith("export ")]
        assert len(exports) == len(set(exports)), (name, sorted(e for e in exports if exports.count(e) > 1))
        conf = parse_nccl_conf(conf_path.read_text())
        for k, v in rec.settings().items():
            if "$" not in v:
                assert conf[k] == v, (name, k)
        assert "${" not in "".join(l for l in conf_path.read_text().splitlines() if not l.startswith("#"))
        script.append(f'bash -n "{env_path}" || echo "SYNTAX {name}"; printf "\\001%s\\n" "{name}"; '
                      f'env -i bash -c \'set -a; . "$0"; env -0\' "{env_path}"')
    out = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, timeout=60).stdout
    assert "SYNTAX" not in out
    blocks = {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in out.split("\x01")[1:]}
    for name, rec in recs.items():
        got = dict(item.split("=", 1) for item in blocks[name].split("\0") if "=" in item)
        got = {k: v for k, v in got.items() if k.startswith(("NCCL_", "FI_", "RDMAV_"))}
        want = {k: v.replace("$HOME", "") for k, v in rec.settings().items()}  # HOME is unset under env -i
        assert got == want, name
    mega = recs["gcp-a3-mega-tcpxo.env"].settings()
    assert mega["NCCL_TUNER_CONFIG_PATH"] == "/var/lib/tcpxo/lib64/a3plus_tuner_config.textproto"
    assert recs["awkward"].settings()["NCCL_TUNER_CONFIG_PATH"] == "/opt/it's a \"dir\"/$HOME/x"
