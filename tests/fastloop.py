"""The fast loop: ``python -m pytest -m "not slow"`` runs in about a minute and still imports every
module of ccdiag, probes and exporters.

Two halves, wired in by ``conftest.py``:

* every test of a real component (Slurm, Prometheus, network namespaces, OpenMPI) is also ``slow``,
  so the fast loop leaves them out without losing their own markers (CI still runs them all); so are
  the fuzz files and the tests named in :data:`SLOW_TESTS` (each took 0.8 s or more on the 2-core
  development machine under load: daemons started, subprocesses per case, sample replays,
  pathological inputs). A name there that no longer exists fails the collection, so the list cannot
  rot silently;
* after a complete fast run (``-m "not slow"`` over the whole suite, nothing failed), the run fails
  when a module is imported by no fast test: a module only the slow tests reach would drift
  unnoticed in the loop a developer runs. The modules that cannot be imported in-process are named
  in :data:`NOT_IN_PROCESS`, each with its reason.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

#: markers of tests that start a real service or component: always slow as well
REAL_COMPONENTS = ("slurm", "prometheus", "netns", "mpi")
#: the marker expression of the fast loop, as documented in tests/README.md
FAST = "not slow"
#: modules no test imports in the test process, and why
NOT_IN_PROCESS = {
    "ccdiag.__main__": "runs the CLI when imported; tested through `python -m ccdiag` in a child process",
}


#: whole files that are slow: property-based fuzzing (bench/bench_fuzz.py runs the long version)
SLOW_FILES = ("test_fuzz_snapshot.py", "test_benchparse_fuzz.py", "test_fuzz_smi_topo.py")
#: slow tests by file (parametrized tests by their function name)
SLOW_TESTS: dict[str, tuple[str, ...]] = {
    "test_bench_engine.py": (
        "test_a_copy_that_never_completes_costs_the_budget_and_is_said",
        "test_check_bench_quick_folds_benchmark_findings_into_the_verdict",
        "test_check_bench_quick_on_a_replay_keeps_the_verdict_and_lists_the_skips",
        "test_gpu_at_x8_is_named_as_the_trained_down_link",
        "test_healthy_host_copies_pass_with_figures_and_expectations", "test_nvlink_down_is_named_on_the_pair_path",
        "test_p2p_matrix_names_the_gpu_slow_with_every_peer",
        "test_pairs_below_their_nvlink_count_name_the_links_down",
        "test_remote_numa_penalty_is_measured_with_the_thread_really_bound",
    ),
    "test_realcases.py": ("test_no_ok_with_nothing_judged_on_any_file",),
    "test_bench_import.py": (
        "test_every_corpus_file_is_judged_or_refused_with_its_line",
    ),
    "test_bench_rdma.py": (
        "test_a_hung_ib_write_bw_is_killed_at_the_budget", "test_client_started_again_until_the_server_listens",
        "test_perftest_adapter_runs_server_and_client_per_port_and_reads_the_client",
        "test_perftest_error_is_that_ports_error_with_perftests_words",
        "test_perftest_registers_gpu_memory_by_dmabuf_first_and_says_which",
    ),
    "test_bugreport.py": (
        "test_check_bug_report_names_the_power_brake_on_every_gpu",
        "test_snapshot_bug_report_writes_a_snapshot_that_replays_to_the_same_verdict",
    ),
    "test_check_cli.py": (
        "test_degraded_sample_fails_with_failures_first", "test_healthy_sample_passes",
        "test_json_report_is_one_valid_document", "test_strict_turns_warnings_into_failure",
    ),
    "test_deadline_guard.py": (
        "test_a_report_that_cannot_be_built_in_time_still_carries_the_verdict_and_every_problem",
        "test_a_snapshot_that_loads_past_the_deadline_gives_one_unknown_document",
    ),
    "test_check_deadline.py": (
        "test_a_failure_found_before_the_deadline_still_fails",
        "test_cli_live_on_this_machine_gives_a_verdict_not_a_traceback", "test_cli_timeout_10_with_hung_driver",
        "test_garbage_replay_is_a_one_line_input_error", "test_hung_command_and_nvml_call_are_named_and_bounded",
        "test_missing_replay_file_is_an_input_error", "test_real_probes_against_hung_nvml_finish_in_time",
    ),
    "test_checks_fabric_report.py": (
        "test_findings_fit_the_schema",
    ),
    "test_checks_gpu_samples.py": (
        "test_degraded_sample_names_each_gpu_fault", "test_healthy_sample_has_no_gpu_warn_fail_or_unknown",
    ),
    "test_cli_main.py": (
        "test_a_closed_pipe_never_changes_the_verdict", "test_a_missing_root_is_bad_input",
        "test_help_and_version_work_without_extras", "test_usage_errors_exit_2_without_traceback",
    ),
    "test_cli_topo.py": (
        "test_a_pasted_matrix_of_512_devices_is_shown_as_plain_text",
        "test_degraded_affinity_routes_around_the_down_nic_and_shows_the_lost_gpu",
        "test_degraded_expected_bandwidth_rows_are_honest_about_capability_and_trained",
        "test_degraded_json_carries_nic_and_gpu_states", "test_healthy_sample_has_no_down_nic_or_failed_gpu",
        "test_live_run_without_driver_exits_3_and_lists_interfaces", "test_record_then_replay_gives_the_same_report",
        "test_topo_healthy_text", "test_topo_svg_via_graphviz", "test_unwritable_output_is_one_line_and_exit_2",
        "test_usable_nic_agrees_with_the_gpudirect_check",
    ),
    "test_cluster_check.py": (
        "test_an_unwritable_reports_dir_is_an_input_error", "test_one_rank_alone_refuses_to_report",
    ),
    "test_cluster_compare.py": (
        "test_a_device_or_a_fifo_is_refused_like_every_other_input", "test_cli_fleet_and_diff_and_bad_input",
        "test_integer_noise_and_momentary_readings_do_not_fail_a_small_healthy_fleet",
        "test_malformed_reports_are_each_named_and_the_rest_compared", "test_outliers_name_the_odd_host_only",
    ),
    "test_cluster_nccl_agree.py": (
        "test_a_degraded_node_writes_the_shared_settings_of_its_kind", "test_a_single_host_is_skipped_not_passed",
        "test_a_tie_names_no_odd_host_and_says_unknown", "test_the_host_whose_hca_list_differs_is_named_with_both_values",
    ),
    "test_crossmember.py": (
        "test_a_consistent_node_has_no_consistency_finding", "test_every_command_survives",
        "test_the_disagreement_is_named",
    ),
    "test_daemon.py": (
        "test_a_probe_that_hangs_in_a_collection_child_leaves_nothing_behind",
        "test_a_probe_that_hangs_never_blocks_a_scrape_and_is_not_restarted",
        "test_a_probe_that_raises_is_marked_and_the_rest_still_served", "test_bad_config_exits_2_with_one_line",
        "test_corrupt_sysfs_files_lose_only_their_own_values", "test_curl_gets_401_for_a_wrong_password",
        "test_endpoint_serves_the_sample_with_health_and_ready", "test_gzip_scrape_decodes_to_the_same_exposition",
        "test_health_fails_without_a_running_loop", "test_once_prints_one_exposition",
        "test_sighup_reloads_the_config_and_sigusr1_collects_now",
        "test_sigterm_stops_the_daemon_cleanly_and_tells_systemd", "test_tls_and_basic_auth_with_a_real_tls_client",
    ),
    "test_daemon_config.py": (
        "test_once_exits_0_when_the_cycle_completes_even_if_probes_failed",
        "test_reload_with_an_out_of_range_value_keeps_the_running_settings",
        "test_run_cycle_reports_a_cycle_that_broke_and_keeps_the_last_published",
    ),
    "test_daemon_isolation.py": (
        "test_a_bad_value_fails_that_probe_not_the_cycle",
        "test_a_reload_from_dev_zero_is_refused_fast_with_bounded_memory_and_keeps_the_settings",
        "test_frames_sent_from_several_threads_of_the_child_arrive_whole",
        "test_scrapes_are_answered_while_a_cycle_is_stuck_in_a_pathological_parse",
    ),
    "test_engine_libraries.py": (
        "test_the_cuda_worker_without_a_device_says_cuda_is_not_usable",
        "test_the_pyverbs_worker_reaches_the_device_list_and_reports_each_port",
    ),
    "test_escapes.py": (
        "test_a_hostile_host_name_is_never_printed_raw",
    ),
    "test_exporter_conventions.py": (
        "test_a_lost_gpu_keeps_its_bus_id_and_last_known_uuid", "test_every_pci_bus_id_uses_dcgm_exporters_spelling",
        "test_exporter_toolkit_flag_names_and_telemetry_path", "test_no_one_hot_status_family",
    ),
    "test_host.py": (
        "test_snapshot_members_of_the_wrong_shape_are_refused",
    ),
    "test_layers.py": (
        "test_every_import_points_upstream",
        "test_the_topology_and_the_checks_never_reach_the_command_line_or_the_exporters",
    ),
    "test_metrics.py": (
        "test_degraded_golden_shows_what_is_broken",
        "test_samples_export_nvlink_traffic_for_every_link_that_answers", "test_whole_exposition_matches_golden",
    ),
    "test_nccl.py": (
        "test_a_roce_port_without_a_v2_gid_leaves_only_the_hca_list_changed",
        "test_a_vm_flattened_tree_adds_a_topology_file_and_nothing_else",
        "test_debugging_variables_already_set_are_named_for_removal",
        "test_docker0_and_container_interfaces_are_never_chosen",
        "test_env_output_sources_in_a_shell_and_passes_ccdiags_own_environment_check",
        "test_json_output_validates_and_nccl_conf_is_key_value",
        "test_nvlink_nodes_get_no_ring_order_advice",
        "test_rccl_on_one_host_puts_its_failure_first_and_makes_no_cross_host_claim",
       
    ),
    "test_platform_imds.py": ("test_a_service_that_never_answers_is_bounded_and_remembered",),
    "test_policy.py": (
        "test_a_stricter_policy_fails_the_healthy_node_on_rate_and_count",
        "test_policy_init_then_check_holds_degraded_node_to_it",
        "test_policy_init_warns_when_the_reference_node_is_not_healthy",
    ),
    "test_redact_live.py": (
        "test_a_redacted_sample_still_gives_the_same_verdict",
    ),
    "test_roundtrip.py": (
        "test_sample_replay_rerecorded_is_stable",
    ),
    "test_samples.py": (
        "test_committed_samples_match_the_generator",
    ),
    "test_scale.py": (
        "test_a_300_nic_node_completes", "test_fast_matrix_rows_on_the_scale_node",
    ),
    "test_snapshot_cli.py": (
        "test_snapshot_cli_records_this_machine_and_redacts_on_rewrite",
    ),
    "test_snapshot_validate.py": (
        "test_a_host_name_with_terminal_escapes_is_shown_escaped",
        "test_a_string_where_a_number_belongs_names_member_and_field",
    ),
    "test_stages.py": (
        "test_a_check_that_never_returns_is_the_deadline_not_a_hang",
        "test_a_hung_probe_leaves_the_judge_its_reserve",
    ),
    "test_systemd.py": (
        "test_execstart_uses_the_ccdiag_console_script_and_real_options",
    ),
    "test_verdict.py": (
        "test_prolog_and_epilog_drain_with_ccdiags_reason",
    ),
}


def _is_slow(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(m) for m in REAL_COMPONENTS):
        return True
    fname = item.path.name
    return fname in SLOW_FILES or item.originalname in SLOW_TESTS.get(fname, ())


def defined_tests(path: pathlib.Path) -> set[str]:
    """The test functions a file defines (at module level or in a class), read from its source:
    what exists, whatever a ``-k``, ``-m`` or ``file::name`` selection collected of it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    return {n.name for body in bodies for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def mark_real_components_slow(items: list[pytest.Item]) -> None:
    """Mark the real-component tests and the listed ones ``slow``; refuse names in the lists that
    their file (when collected) does not define. Existence is read from the file, not from the
    items collected, so one test rerun by its id (``file::name``) is not taken for a stale list."""
    files: dict[str, pathlib.Path] = {}
    for item in items:
        files.setdefault(item.path.name, item.path)
        if _is_slow(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    defined = {f: defined_tests(path) for f, path in files.items() if f in SLOW_TESTS}
    stale = [f"{f}::{t}" for f, names in defined.items() for t in SLOW_TESTS[f] if t not in names]
    if stale:
        raise pytest.UsageError(f"tests/fastloop.py SLOW_TESTS names tests that do not exist: {', '.join(stale)}")


def every_module() -> set[str]:
    """Every module of the installed ccdiag package (probes and exporters included), by name."""
    import ccdiag
    import ccdiag.exporters
    import ccdiag.probes

    roots = {"ccdiag": pathlib.Path(ccdiag.__file__).resolve().parent,
             "ccdiag.probes": pathlib.Path(ccdiag.probes.__path__[0]),
             "ccdiag.exporters": pathlib.Path(ccdiag.exporters.__path__[0])}
    names = set()
    for prefix, base in roots.items():
        for path in base.rglob("*.py"):
            rel = path.relative_to(base)
            if prefix == "ccdiag" and rel.parts[0] in ("probes", "exporters"):
                continue
            names.add(".".join([prefix, *rel.with_suffix("").parts]).removesuffix(".__init__"))
    return names


def is_complete_fast_run(session: pytest.Session) -> bool:
    config = session.config
    return (config.getoption("markexpr", "") == FAST and not config.getoption("keyword", "")
            and config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and session.testsfailed == 0 and not session.shouldstop)


def unimported_modules() -> list[str]:
    return sorted(every_module() - set(sys.modules) - set(NOT_IN_PROCESS))


def wrongly_excused() -> list[str]:
    """Modules named in NOT_IN_PROCESS that a fast test imported after all: the excuse is stale."""
    return sorted(set(NOT_IN_PROCESS) & set(sys.modules))


def check_every_module_imported(session: pytest.Session) -> None:
    if not is_complete_fast_run(session):
        return
    problems = []
    missing = unimported_modules()
    if missing:
        problems.append(f"{len(missing)} module(s) imported by no fast test: {', '.join(missing)} (add a fast test, "
                        "or name the module in tests/fastloop.py NOT_IN_PROCESS with the reason)")
    stale = wrongly_excused()
    if stale:
        problems.append(f"imported in-process although NOT_IN_PROCESS excuses them: {', '.join(stale)}")
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in problems:
            if reporter is not None:
                reporter.write_line(f"fast loop: {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
