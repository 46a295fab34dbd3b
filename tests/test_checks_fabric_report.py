"""Every fabric finding, from every named scenario, fits the published report schema."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

import scenarios_fabric as S
from ccdiag.checks import run_checks
from ccdiag.core.findings import STATUSES
from ccdiag.core.readings import to_jsonable

SCENARIOS = {
    "healthy": lambda: S.make_ctx(),
    "healthy_window": lambda: S.make_ctx(S.healthy_runs(), later=S.healthy_runs(), window_s=30),
    "gpu_link_x8": S.sc_gpu_link_x8,
    "bridge_x8_above_nic": S.sc_bridge_x8_above_nic,
    "busy_gpu_gen1": S.sc_busy_gpu_gen1,
    "nic_gen4": S.sc_nic_gen4,
    "gpu_behind_gen4_switch": S.sc_gpu_behind_gen4_switch,
    "acs_on": S.sc_acs_on,
    "ib_polling": S.sc_ib_polling,
    "ib_2x_width": S.sc_ib_2x_width,
    "counters_rising": lambda: S.make_ctx(*S.counter_window(link_downed=2)[:1],
                                          later=S.counter_window(link_downed=2)[1], window_s=30),
    "roce": lambda: S.make_ctx(S.roce_node()),
    "env_bad": lambda: S.make_ctx(S.edit_system(S.healthy_runs(), shm_bytes=64 << 20, memlock_unlimited=False,
                                                memlock_soft_bytes=65536),
                                  env={"NCCL_SOCKET_IFNAME": "eth9", "NCCL_IB_HCA": "mlx5_9", "NCCL_IB_DISABLE": "1"}),
}


@pytest.fixture(scope="module")
def finding_schema():
    schema = json.loads(resources.files("ccdiag").joinpath("schema/report.schema.json").read_text())
    sub = {**schema["$defs"]["finding"], "$defs": schema["$defs"]}
    return jsonschema.validators.validator_for(schema)(sub)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_findings_fit_the_schema(name, finding_schema):
    findings = run_checks(SCENARIOS[name](), only=("pcie.", "ib.", "env."))
    assert findings
    for f in findings:
        doc = json.loads(json.dumps(to_jsonable(f)))
        finding_schema.validate(doc)
        assert f.status in STATUSES
        assert not f.summary.startswith("check ")  # no check crashed into the isolation path
        if f.status in ("warn", "fail"):
            assert f.remedy, f


def test_env_bad_scenario_reports_each_problem_once():
    findings = run_checks(SCENARIOS["env_bad"](), only=("env.",))
    got = {(f.check, f.status) for f in findings if f.status in ("warn", "fail")}
    assert got == {("env.socket_ifname", "fail"), ("env.ib_hca", "fail"), ("env.nccl_disable", "warn"),
                   ("env.shm", "fail"), ("env.memlock", "fail")}
