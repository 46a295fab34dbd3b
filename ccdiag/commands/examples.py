"""Two or three examples for each command's ``--help`` (click epilogs), kept in one place.

Each example is a command line a user can paste; the ones that need no hardware are run by the
tests (tests/test_help_examples.py) against the bundled samples, so an example cannot rot.
"""

from __future__ import annotations

SAMPLE = "samples/hgx-h100-8gpu-degraded.snap.tar.gz"

#: command path -> (command line, what it does)
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "check": [("ccdiag check", "is this node fit to run a job? (exit 0 ok, 1 failed, 3 no verdict)"),
              (f"ccdiag check --replay {SAMPLE}", "the verdict of a recorded node"),
              (f"ccdiag check --replay {SAMPLE} --gpu 3", "one GPU and what affects it (index, UUID or PCI address)"),
              ("ccdiag check --json --output report.json --policy fleet.toml", "held to a fleet policy, as JSON")],
    "topo": [("ccdiag topo", "GPU/NIC matrix, GPUs, NIC affinity, links, expected bandwidth"),
             (f"ccdiag topo --replay {SAMPLE} --dot topo.dot", "the graph of a recorded node"),
             ("ccdiag topo --from-smi pasted.txt", "a pasted `nvidia-smi topo -m`, as ccdiag reads it")],
    "snapshot": [("ccdiag snapshot -o node.snap.tar.gz --window 5", "record this node, counters 5 s apart"),
                 ("ccdiag snapshot --redact -o ticket.snap.tar.gz", "pseudonymised, to attach to a ticket"),
                 (f"ccdiag snapshot --replay {SAMPLE} --redact -o red.snap.tar.gz", "redact a recorded one")],
    "policy": [("ccdiag policy init -o fleet.toml", "on a node known to be healthy"),
               ("ccdiag policy show fleet.toml", "each value and where it comes from"),
               ("ccdiag check --policy fleet.toml", "hold another node to it")],
    "policy init": [("ccdiag policy init -o fleet.toml", "this node's expectations"),
                    (f"ccdiag policy init --replay {SAMPLE} -o sample.toml --force", "from a recorded node")],
    "policy show": [("ccdiag policy show fleet.toml", "each value and whether the file or the default sets it"),
                    ("ccdiag policy show fleet.toml --json", "the same as JSON")],
    "daemon": [("ccdiag daemon", "serve http://127.0.0.1:9643/metrics, a cycle every 15 s"),
               ("ccdiag daemon --config /etc/ccdiag/daemon.toml", "the settings the systemd unit uses"),
               (f"ccdiag daemon --once --replay {SAMPLE}", "one cycle's exposition on stdout")],
    "nccl": [("ccdiag nccl --format env -o nccl.env", "settings to source in a job script"),
             (f"ccdiag nccl --replay {SAMPLE}", "the settings for a recorded node, with reasons"),
             ("ccdiag nccl --log run.log", "what an NCCL_DEBUG=INFO log says NCCL chose, and every difference")],
    "bench": [("ccdiag bench list", "which benchmarks can run here, and why not"),
              ("ccdiag bench --quick", "short, bounded figures for every link"),
              (f"ccdiag bench import nvbandwidth.txt --replay {SAMPLE}", "judge figures you already have")],
    "bench run": [("ccdiag bench run h2d p2p --budget 60", "two benchmarks within a minute"),
                  ("ccdiag bench run --quick --json", "short figures as JSON")],
    "bench list": [("ccdiag bench list", "which benchmarks can run here, and why not"),
                   (f"ccdiag bench list --replay {SAMPLE}", "the same for a recorded node")],
    "bench import": [(f"ccdiag bench import nvbandwidth.txt --replay {SAMPLE}", "nvbandwidth output"),
                     ("ccdiag bench import all_reduce_perf.txt", "nccl-tests, against this node's topology"),
                     ("ccdiag bench import ib.json --perftest-unit Gb/sec", "perftest JSON run with --report_gbits"),
                     ("ccdiag bench import bandwidthTest.txt p2p.txt --gpu-pci-id 10de:2684",
                      "several files; a GPU the driver names 'NVIDIA Graphics Device'")],
    "bench allreduce": [("mpirun -np 8 --map-by ppr:1:node --hostfile hosts ccdiag bench allreduce -b 1M -e 64M -f 4",
                         "ring allreduce with per-hop timing"),
                        ("srun -N8 --ntasks-per-node=1 ccdiag bench allreduce --json", "under Slurm")],
    "bench pairs": [("mpirun -np 8 --map-by ppr:1:node --hostfile hosts ccdiag bench pairs --hostfile-out ring.hosts",
                     "every host pair; the best ring order"),
                    ("srun -N8 --ntasks-per-node=1 ccdiag bench pairs --sizes 64M", "under Slurm")],
    "bench locate": [("mpirun -np 64 --map-by ppr:1:node --hostfile hosts ccdiag bench locate --layout topology.conf",
                      "the slow host or link, rings per leaf switch"),
                     ("srun -N256 --ntasks-per-node=1 ccdiag bench locate --layout nodes.json --json",
                      "leaves from the Kubernetes topology labels"),
                     ("srun -N72 --ntasks-per-node=1 ccdiag bench locate --layout nvml --hostfile-out ring.hosts",
                      "NVLink domains from NVML; the ring order they recommend")],
    "cluster": [("mpirun -np 8 --map-by ppr:1:node --hostfile hosts ccdiag cluster check --reports-dir reports/",
                 "every node's check in one report"),
                ("srun -N8 --ntasks-per-node=1 ccdiag cluster check && ccdiag compare reports/", "under Slurm")],
    "cluster check": [("mpirun -np 8 --map-by ppr:1:node --hostfile hosts ccdiag cluster check --reports-dir reports/",
                       "one rank per node"),
                      ("srun -N8 --ntasks-per-node=1 ccdiag cluster check --json", "under Slurm, as JSON")],
    "compare": [("ccdiag compare reports/", "outliers among many hosts' JSON reports"),
                ("ccdiag compare node1.json node2.json", "a diff of two")],
    "health": [("ccdiag health run", "one turn: an active check if the node is idle and one is due"),
               ("ccdiag health status", "the validity window, the ladder and the drain cap"),
               ("ccdiag check --reuse-pass /var/lib/ccdiag/health.json", "a pre-job check that reuses a valid pass")],
    "health run": [("ccdiag health run", "what ccdiag-health.timer runs"),
                   ("ccdiag health run --force --json", "check now, whatever the cadence, as JSON")],
    "health loop": [("ccdiag health loop --config /etc/ccdiag/health.toml", "turns until stopped (a container)"),
                    ("ccdiag health loop --every 30", "a turn every 30 s")],
    "health act": [("ccdiag health act --report report.json --node-state drained --node-reason 'ccdiag-hc: x'",
                    "what the Slurm health check asks"),
                   ("ccdiag health act --report report.json --report-only", "decide and log, run nothing")],
    "health status": [("ccdiag health status", "the state in words"),
                      ("ccdiag health status --json", "the state as JSON")],
    "health yield": [("ccdiag health yield", "a job is starting: stop the running check now"),
                     ("ccdiag health yield --state-dir /var/lib/ccdiag", "the same, for a state elsewhere")],
}


def epilog(command: str) -> str:
    """The ``Examples:`` block of ``command``'s help, laid out as written (click's ``\\b``)."""
    lines = ["\b", "Examples:"]
    for cmd, what in EXAMPLES[command]:
        lines += [f"  # {what}", f"  {cmd}"]
    return "\n".join(lines)
