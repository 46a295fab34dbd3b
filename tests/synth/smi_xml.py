"""A SYNTHESIZED ``nvidia-smi -q -x`` document written from an NVML probe observation.

Why: the evidence script's dry run (no GPU) compares the probe's reading of a recorded snapshot
with ``nvidia-smi -q -x``, and the tests that wait for real evidence recompute that comparison from
committed files; on a machine without a GPU both need an XML of the *same* GPUs as the snapshot.
This one is made up from the observation itself, with the element names and value spellings of the
real outputs in tests/fixtures/corpus/smi-q-x (driver 535 layout). It proves the plumbing, never
the probe: the probe's values went in, so they come back equal. Its first comment says SYNTHESIZED.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

REASON_TAGS = {"idle": "gpu_idle", "applications_clocks_setting": "applications_clocks_setting",
               "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown", "hw_thermal_slowdown": "hw_thermal_slowdown",
               "hw_power_brake_slowdown": "hw_power_brake_slowdown", "sync_boost": "sync_boost",
               "sw_thermal_slowdown": "sw_thermal_slowdown", "display_clocks_setting": "display_clocks_setting"}


def _v(value: Any, unit: str = "", fmt: str = "{}") -> str:
    if value is None:
        return "N/A"
    if isinstance(value, bool):
        return "Enabled" if value else "Disabled"
    return fmt.format(value) + (f" {unit}" if unit else "")


def _yes(value: Any) -> str:
    return "N/A" if value is None else ("Yes" if value else "No")


def smi_xml(observation: Any) -> str:
    gpus = []
    for g in observation.gpus:
        domain, rest = (g.bus_id or "0000:00:00.0").split(":", 1)
        reasons = "".join(f"<clocks_event_reason_{tag}>{'Active' if name in g.clock_event_names else 'Not Active'}"
                          f"</clocks_event_reason_{tag}>" for name, tag in REASON_TAGS.items())
        gpus.append(f"""  <gpu id="{int(domain, 16):08X}:{rest.upper()}">
    <product_name>{escape(g.name or 'N/A')}</product_name>
    <persistence_mode>{_v(g.persistence_mode)}</persistence_mode>
    <mig_mode><current_mig>{_v(g.mig_mode_current)}</current_mig><pending_mig>{_v(g.mig_mode_pending)}</pending_mig></mig_mode>
    <serial>{escape(g.serial or 'N/A')}</serial>
    <uuid>{escape(g.uuid or 'N/A')}</uuid>
    <pci>
      <pci_bus_id>{int(domain, 16):08X}:{rest.upper()}</pci_bus_id>
      <pci_gpu_link_info>
        <pcie_gen><max_link_gen>{_v(g.pcie_gen_max)}</max_link_gen><current_link_gen>{_v(g.pcie_gen_current)}</current_link_gen>
          <max_device_link_gen>{_v(g.pcie_gen_device_max)}</max_device_link_gen></pcie_gen>
        <link_widths><max_link_width>{_v(g.pcie_width_max, fmt='{}x')}</max_link_width>
          <current_link_width>{_v(g.pcie_width_current, fmt='{}x')}</current_link_width></link_widths>
      </pci_gpu_link_info>
      <replay_counter>{_v(g.pcie_replay_counter)}</replay_counter>
    </pci>
    <clocks_event_reasons>{reasons if g.clock_event_reasons is not None else ''}</clocks_event_reasons>
    <fb_memory_usage><total>{_v(g.memory_total_bytes >> 20 if g.memory_total_bytes else None, 'MiB')}</total></fb_memory_usage>
    <utilization><gpu_util>0 %</gpu_util></utilization>
    <ecc_mode><current_ecc>{_v(g.ecc_mode_current)}</current_ecc><pending_ecc>{_v(g.ecc_mode_pending)}</pending_ecc></ecc_mode>
    <ecc_errors>
      <volatile><dram_correctable>{_v(g.ecc_volatile_corrected)}</dram_correctable><dram_uncorrectable>{_v(g.ecc_volatile_uncorrected)}</dram_uncorrectable></volatile>
      <aggregate><dram_correctable>{_v(g.ecc_aggregate_corrected)}</dram_correctable><dram_uncorrectable>{_v(g.ecc_aggregate_uncorrected)}</dram_uncorrectable></aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>{_v(g.retired_pages_sbe)}</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>{_v(g.retired_pages_dbe)}</retired_count></double_bit_retirement>
    </retired_pages>
    <remapped_rows><remapped_row_corr>{_v(g.remapped_rows_correctable)}</remapped_row_corr>
      <remapped_row_unc>{_v(g.remapped_rows_uncorrectable)}</remapped_row_unc>
      <remapped_row_pending>{_yes(g.remapped_rows_pending)}</remapped_row_pending>
      <remapped_row_failure>{_yes(g.remapped_rows_failure)}</remapped_row_failure></remapped_rows>
    <temperature><gpu_temp>{_v(g.temperature_c, 'C', '{:.0f}')}</gpu_temp>
      <gpu_temp_max_threshold>{_v(g.temp_shutdown_c, 'C', '{:.0f}')}</gpu_temp_max_threshold>
      <gpu_temp_slow_threshold>{_v(g.temp_slowdown_c, 'C', '{:.0f}')}</gpu_temp_slow_threshold>
      <gpu_temp_max_gpu_threshold>{_v(g.temp_gpu_max_c, 'C', '{:.0f}')}</gpu_temp_max_gpu_threshold>
      <memory_temp>{_v(g.memory_temperature_c, 'C', '{:.0f}')}</memory_temp>
      <gpu_temp_max_mem_threshold>{_v(g.temp_mem_max_c, 'C', '{:.0f}')}</gpu_temp_max_mem_threshold></temperature>
    <gpu_power_readings><power_draw>{_v(g.power_w, 'W', '{:.2f}')}</power_draw>
      <current_power_limit>{_v(g.power_limit_w, 'W', '{:.2f}')}</current_power_limit></gpu_power_readings>
    <applications_clocks><graphics_clock>{_v(g.clock_sm_app_mhz, 'MHz')}</graphics_clock></applications_clocks>
    <max_clocks><sm_clock>{_v(g.clock_sm_max_mhz, 'MHz')}</sm_clock></max_clocks>
    <fabric><state>{escape((g.fabric_state or 'N/A').replace('_', ' ').title() if g.fabric_state else 'N/A')}</state></fabric>
  </gpu>""")
    return (f"""<?xml version="1.0" ?>
<!-- SYNTHESIZED from an NVML probe observation (tests/synth/smi_xml.py): not nvidia-smi output -->
<nvidia_smi_log>
  <driver_version>{escape(observation.driver_version or 'N/A')}</driver_version>
  <cuda_version>{escape(observation.cuda_driver_version or 'N/A')}</cuda_version>
""" + "\n".join(gpus) + "\n</nvidia_smi_log>\n")
