"""The checks' shared toolkit: one gate driven by declared needs, the counter window, typed access."""

from __future__ import annotations

import pytest

import scenarios_fabric as S
from ccdiag.checks import REGISTRY, CheckContext, check, load_all, run_checks
from ccdiag.checks.common import gate, node_component, policy_source, second_sample
from ccdiag.core.findings import PASS, SKIP, UNKNOWN, Finding
from ccdiag.inputs.policy import Policy
from ccdiag.probes.registry import ALL_PROBES, ProbeRun


@pytest.fixture
def probe_check():
    """A throw-away check that needs pcie and uses kmsg, counting its calls."""
    calls = []

    @check("zz_test.needs_pcie", needs=("pcie",), uses=("kmsg",), what="test thing")
    def _c(ctx):
        calls.append(ctx)
        return [Finding("zz_test.needs_pcie", PASS, node_component(), "ran")]

    yield calls
    REGISTRY.pop("zz_test.needs_pcie", None)


def test_declarations_name_real_probes_and_say_what_they_judge():
    specs = load_all()
    for name, spec in specs.items():
        assert set(spec.needs) <= set(ALL_PROBES), name
        assert set(spec.uses) <= set(ALL_PROBES), name
        assert not set(spec.needs) & set(spec.uses), name
        if spec.needs:
            assert spec.what or name.startswith("gpu.") or name.startswith("nvlink."), name


@pytest.mark.parametrize("status,expected", [("unavailable", SKIP), ("timeout", UNKNOWN), ("failed", UNKNOWN)])
def test_a_needed_probe_that_gave_nothing_stops_the_check_before_it_runs(probe_check, status, expected):
    runs = dict(S.healthy_runs())
    runs["pcie"] = ProbeRun("pcie", status, 0.1, None, "why")
    findings = run_checks(S.make_ctx(runs), only=["zz_test."])
    assert probe_check == []
    assert [(f.check, f.status) for f in findings] == [("zz_test.needs_pcie", expected)]
    assert "test thing" in findings[0].summary and findings[0].details["probe_status"] == status


def test_a_used_probe_does_not_gate(probe_check):
    runs = dict(S.healthy_runs())
    runs["kmsg"] = ProbeRun("kmsg", "timeout", 5.0, None, "deadline")
    findings = run_checks(S.make_ctx(runs), only=["zz_test."])
    assert len(probe_check) == 1 and [f.summary for f in findings] == ["ran"]


def test_gate_defaults_to_declared_needs(probe_check):
    runs = dict(S.healthy_runs())
    ctx = S.make_ctx(runs)
    assert gate(ctx, "zz_test.needs_pcie") is None
    runs["pcie"] = ProbeRun("pcie", "failed", 0.1, None, "EIO")
    assert gate(S.make_ctx(runs), "zz_test.needs_pcie").status == UNKNOWN


def test_counter_window_skips_without_window_and_is_unknown_when_second_sample_failed():
    runs = dict(S.healthy_runs())
    later, f = second_sample(S.make_ctx(runs), "pcie", "x.counters", "X counters", {"a": 1})
    assert later is None and f.status == SKIP and f.details == {"lifetime_nonzero": {"a": 1}}
    bad = dict(runs)
    bad["pcie"] = ProbeRun("pcie", "timeout", 5.0, None, "deadline")
    ctx = CheckContext(runs=runs, later=bad, window_s=10.0)
    later, f = second_sample(ctx, "pcie", "x.counters", "X counters")
    assert later is None and f.status == UNKNOWN and "timeout" in f.summary
    ctx = CheckContext(runs=runs, later=runs, window_s=10.0)
    later, f = second_sample(ctx, "pcie", "x.counters", "X counters")
    assert f is None and later is ctx.pcie


def test_typed_access_and_policy_source():
    runs = dict(S.healthy_runs())
    ctx = S.make_ctx(runs)
    assert ctx.pcie is ctx.data("pcie") and ctx.infiniband is ctx.data("infiniband")
    assert policy_source(ctx) == "default policy"
    ctx = CheckContext(runs=runs, policy=Policy(source="fleet.toml"))
    assert policy_source(ctx) == "policy fleet.toml"
    assert policy_source(ctx, "min_pcie_gen") == "policy fleet.toml: min_pcie_gen"
