"""Policy files: TOML in and out, strict reading with line numbers, ``policy init`` from a healthy
node, and ``check --policy`` holding another node to it."""

from __future__ import annotations

import json
import pathlib

import pytest

from ccdiag.inputs.policy import DEFAULT_POLICY, Policy, PolicyError, load_policy, parse_policy, pcie_gen, \
    policy_from_observations, to_toml
from ccdiag.probes.registry import OK, ProbeRun

REPO = pathlib.Path(__file__).resolve().parent.parent
HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"
needs_samples = pytest.mark.skipif(not (HEALTHY.exists() and DEGRADED.exists()),
                                   reason="bundled samples not built (samples/make_samples.py)")


from cli_runner import run  # noqa: E402


def test_toml_round_trip_keeps_every_value():
    p = Policy(expected_gpu_count=8, gpu_model="NVIDIA H100 80GB HBM3", min_pcie_gen=5, min_pcie_width=16,
               ib_rate_gbit_s=400.0, expected_ib_ports=8, ignore_xids=(43, 13), xid_window_s=3600.0,
               temperature_warn_c=83.5, min_shm_bytes=1 << 32, min_memlock_bytes=1 << 30,
               require_persistence_mode=False, require_peermem=True, nvlink_error_rate_warn=5,
               ib_error_rate_warn=10)
    back = parse_policy(to_toml(p, ["header line"]), "f.toml")
    assert back == Policy(**{**p.__dict__, "ignore_xids": (13, 43), "source": "f.toml"})


def test_absent_values_stay_absent():
    text = to_toml(DEFAULT_POLICY)
    assert "# expected_gpu_count =" in text  # shown, commented out: TOML has no null
    assert parse_policy(text) == Policy(source="<policy>")


@pytest.mark.parametrize("text, line, words", [
    ("expected_gpu_count = 8\ngpu_model = \n", 2, "not valid TOML"),
    ("expected_gpu_count = 8\n[gpu\n", 2, "not valid TOML"),
    ("# c\nexpected_gpu_cuont = 8\n", 2, "unknown key 'expected_gpu_cuont'"),
    ("min_pcie_gen = \"5\"\n", 1, "min_pcie_gen must be an integer"),
    ("\nrequire_peermem = 1\n", 2, "require_peermem must be true or false"),
    ("ignore_xids = [13, \"x\"]\n", 1, "ignore_xids must be a list of integers"),
    ("ib_rate_gbit_s = -1\n", 1, "non-negative"),
    ("[gpu]\ncount = 8\n", 1, "unknown section [gpu]"),
])
def test_malformed_policy_names_file_and_line(text, line, words):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "fleet.toml")
    msg = str(info.value)
    assert msg.startswith("fleet.toml")
    assert f"line {line}" in msg or f"fleet.toml:{line}:" in msg, msg
    assert words in msg


def test_unreadable_policy(tmp_path):
    with pytest.raises(PolicyError, match="cannot read policy"):
        load_policy(str(tmp_path / "absent.toml"))
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PolicyError, match="not a text file"):
        load_policy(str(binary))


@pytest.mark.parametrize("gts, gen", [(2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6), (None, None),
                                      (1.0, None)])
def test_pcie_gen_of_speed(gts, gen):
    assert pcie_gen(gts) == gen


def test_policy_from_observations_uses_link_capability_not_idle_speed():
    """Synthesized observations: GPU links idle at Gen1 (as GPUs do) but capable of Gen5 x16; one
    GPU sits behind a Gen4 switch port, which is what its link can do."""
    from ccdiag.probes.infiniband import IbDevice, IbObservation, IbPort
    from ccdiag.probes.nvml import Gpu, NvmlObservation
    from ccdiag.probes.pcie import PcieDevice, PcieObservation

    gpus = tuple(Gpu(index=i, name="NVIDIA H100 80GB HBM3", bus_id=f"0000:{0x18 + i:02x}:00.0") for i in range(4))
    devices = [PcieDevice(bdf="0000:17:00.0", kind="bridge", max_link_speed_gts=32.0, max_link_width=16),
               PcieDevice(bdf="0000:20:00.0", kind="bridge", max_link_speed_gts=16.0, max_link_width=16)]
    for i in range(4):
        devices.append(PcieDevice(bdf=f"0000:{0x18 + i:02x}:00.0", kind="gpu",
                                  parent="0000:20:00.0" if i == 3 else "0000:17:00.0",
                                  current_link_speed_gts=2.5, max_link_speed_gts=32.0,
                                  current_link_width=16, max_link_width=16))
    ports = (IbPort(port=1, state="ACTIVE", rate_gbit_s=400.0), )
    ib = IbObservation(devices=(IbDevice("mlx5_0", ports=ports), IbDevice("mlx5_1", ports=ports),
                                IbDevice("mlx5_2", ports=(IbPort(port=1, state="DOWN", rate_gbit_s=10.0),))))
    runs = {"nvml": ProbeRun("nvml", OK, 0.1, NvmlObservation(device_count=4, gpus=gpus)),
            "pcie": ProbeRun("pcie", OK, 0.1, PcieObservation(devices=tuple(devices))),
            "infiniband": ProbeRun("infiniband", OK, 0.1, ib)}
    p = policy_from_observations(runs)
    assert p.expected_gpu_count == 4
    assert p.gpu_model == "NVIDIA H100 80GB HBM3"
    assert p.min_pcie_gen == 4  # limited by the Gen4 switch port above GPU3, not by the idle Gen1
    assert p.min_pcie_width == 16
    assert p.expected_ib_ports == 2  # the DOWN port is not part of the standard
    assert p.ib_rate_gbit_s == 400.0


def test_policy_from_nothing_expects_nothing():
    assert policy_from_observations({}) == Policy()


@needs_samples
def test_policy_init_then_check_holds_degraded_node_to_it(tmp_path):
    pol = tmp_path / "fleet.toml"
    code, out, err = run("policy", "init", "--replay", str(HEALTHY), "-o", str(pol))
    assert code == 0, err
    p = load_policy(str(pol))
    assert p.expected_gpu_count == 8
    assert p.gpu_model and "H100" in p.gpu_model
    assert p.ib_rate_gbit_s and p.expected_ib_ports
    # the node a policy was made from passes it
    code, out, err = run("check", "--replay", str(HEALTHY), "--policy", str(pol))
    assert code == 0, out
    # the degraded node fails on what the policy demands, and the finding says it was the policy
    code, out, err = run("check", "--replay", str(DEGRADED), "--policy", str(pol), "--json")
    doc = json.loads(out)
    assert code == 1
    by_policy = [f for f in doc["findings"] if f["status"] == "fail"
                 and str(pol) in (f["expected_source"] or "")]
    assert by_policy, [f["check"] for f in doc["findings"] if f["status"] == "fail"]
    # one of its eight RDMA ports is down: below the fleet's port count
    assert any(f["check"].startswith("ib.") for f in by_policy)
    assert doc["policy"]["source"] == str(pol)


@needs_samples
def test_a_stricter_policy_fails_the_healthy_node_on_rate_and_count(tmp_path):
    pol = tmp_path / "fleet.toml"
    run("policy", "init", "--replay", str(HEALTHY), "-o", str(pol))
    text = pol.read_text()
    text = text.replace("ib_rate_gbit_s = 400.0", "ib_rate_gbit_s = 800.0")
    text = text.replace("expected_gpu_count = 8", "expected_gpu_count = 16")
    pol.write_text(text)
    code, out, _ = run("check", "--replay", str(HEALTHY), "--policy", str(pol), "--json")
    doc = json.loads(out)
    assert code == 1
    failed = {f["check"] for f in doc["findings"] if f["status"] == "fail"}
    assert "ib.rate" in failed and "gpu.count" in failed, failed


def test_policy_init_refuses_to_overwrite(tmp_path):
    pol = tmp_path / "fleet.toml"
    pol.write_text("x")
    code, out, err = run("policy", "init", "--root", str(tmp_path), "-o", str(pol))
    assert code == 2 and "--force" in err
    assert pol.read_text() == "x"


def test_policy_init_with_nothing_to_learn_from_is_exit_3(tmp_path):
    code, out, err = run("policy", "init", "--root", str(tmp_path))
    assert code == 3 and "nothing to make a policy from" in err and out == ""


def test_policy_show(tmp_path):
    pol = tmp_path / "p.toml"
    pol.write_text("expected_gpu_count = 8\nignore_xids = [13]\n")
    code, out, err = run("policy", "show", str(pol))
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "8" in rows["expected_gpu_count"] and "file" in rows["expected_gpu_count"]
    assert "default" in rows["temperature_warn_c"]
    code, out, err = run("policy", "show", str(pol), "--json")
    doc = json.loads(out)
    assert doc["kind"] == "policy"
    assert doc["policy"]["values"]["expected_gpu_count"] == 8
    assert doc["policy"]["values"]["ignore_xids"] == [13]
    assert doc["policy"]["origin"]["ignore_xids"] == "file"


def test_policy_show_malformed_is_exit_2_with_line(tmp_path):
    pol = tmp_path / "p.toml"
    pol.write_text("expected_gpu_count = 8\nexpected_gpu_count = 9\n")
    code, out, err = run("policy", "show", str(pol))
    assert code == 2 and out == ""
    assert "line 2" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("line", ["min_pcie_gen = 55", "min_pcie_width = 0", "temperature_warn_c = 400"])
def test_implausible_policy_values_are_refused_with_their_line(tmp_path, line):
    from ccdiag.inputs.policy import PolicyError, load_policy

    path = tmp_path / "p.toml"
    path.write_text("# fleet policy\n" + line + "\n")
    with pytest.raises(PolicyError, match=r"p.toml:2: .* is outside"):
        load_policy(str(path))


def test_policy_init_warns_when_the_reference_node_is_not_healthy():
    import pathlib
    import subprocess
    import sys

    samples = pathlib.Path(__file__).resolve().parent.parent / "samples"
    bad = subprocess.run([sys.executable, "-m", "ccdiag", "policy", "init", "--replay",
                          str(samples / "hgx-h100-8gpu-degraded.snap.tar.gz")], capture_output=True, text=True,
                         timeout=120)
    said = " ".join(bad.stderr.split())  # the warnings wrap to the width, continuations indented
    assert bad.returncode == 0 and "GPU6 gpu_lost" in said and "mlx5_4 port 1" in said
    good = subprocess.run([sys.executable, "-m", "ccdiag", "policy", "init", "--replay",
                           str(samples / "hgx-h100-8gpu-healthy.snap.tar.gz")], capture_output=True, text=True,
                          timeout=120)
    assert good.returncode == 0 and "warning" not in good.stderr


def test_old_unit_key_is_still_read_and_cannot_be_doubled():
    from ccdiag.inputs.policy import PolicyError, parse_policy

    assert parse_policy("ib_rate_gbps = 400\n").ib_rate_gbit_s == 400.0
    assert parse_policy("ib_rate_gbit_s = 200\n").ib_rate_gbit_s == 200.0
    with pytest.raises(PolicyError, match="old name"):
        parse_policy("ib_rate_gbps = 400\nib_rate_gbit_s = 400\n")
