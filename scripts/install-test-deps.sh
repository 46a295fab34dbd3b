#!/usr/bin/env bash
# Installs everything the test suite starts for real: Prometheus + promtool, node_exporter, a
# single-node Slurm with munge, graphviz, systemd-analyze, iproute2 for network namespaces, nftables
# (packet loss and size-based drops between the namespace hosts), tmux
# (the terminal-screen tests), and rdma-core's pyverbs with perftest (they install without an RDMA
# device; the engine tests resolve every verbs name the RDMA engine uses against them).
# Debian packages; safe to run again.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(tmux graphviz prometheus prometheus-node-exporter slurmctld slurmd slurm-client munge systemd iproute2 nftables procps curl openmpi-bin libopenmpi-dev
      rdma-core ibverbs-utils perftest python3-pyverbs)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
