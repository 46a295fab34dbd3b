#!/usr/bin/env python3
"""The evidence of a real GPU node in one run, each stage under its own budget; and, back at the
checkout, the returned folder unpacked where the tests wait for it.

``scripts/gpu-evidence.sh`` installs ccdiag into a throwaway environment and calls ``run`` here
with that environment's interpreter (so the installed package is imported, never the checkout's
source tree). Stages, each writing its files into ``--out`` the moment it ends (a run cut short
still leaves what finished):

* ``node`` -> ``s2-node.tar.gz``: ``ccdiag snapshot``, ``check --json``, ``topo --json``,
  ``daemon --once``, ``nvidia-smi -q -x``/``-q``/``topo -m``, ``lscpu``, ``numactl -H``, the field
  comparison of the probe's NVML reading against ``nvidia-smi -q -x`` (:mod:`evidence_smi`, done
  before anything is redacted), the redacted snapshot and texts (one set of pseudonyms), and the
  replay of the redacted snapshot against the live verdict;
* ``copies`` -> ``s3-copies.tar.gz``: ``ccdiag bench h2d d2h d2d`` at 1 MiB to 1 GiB, the same
  copies through the CUDA driver API (:mod:`copy_driver_api`) and PyTorch
  (:mod:`bench_copy_independent`), nvbandwidth when its source sits beside the checkout and builds,
  clocks and throttle reasons sampled throughout, every ratio;
* ``gpu_self`` -> ``s4-gpu-self.tar.gz``: ``ccdiag bench hbm gemm`` beside the driver API's 1 GiB
  device copy and PyTorch's GEMM;
* after each stage ``summary.json`` and ``summary.txt``: which figures agree within 5 % and which
  do not, what ran and what did not, and why.

Every step that touches the GPU is a child process under a timeout. ``--dry-run`` runs every step
on a machine without a GPU: ccdiag's commands against a recorded snapshot (``--replay``), the
engine path through the CuPy test double (``tests/fakes/cupy``), the independent measures up to
the point where they look for the driver; nothing it writes is a measurement, and it says so.

    python bench/gpu_evidence.py run --out DIR --work DIR --repo DIR [--budget-s 300] [--dry-run ...]
    python bench/gpu_evidence.py unpack DIR [--repo DIR]    # the returned folder -> tests/fixtures/real, bench/results

The returned folder holds at most eight files, none in a subfolder: ``progress.log``,
``s1-install.tar.gz`` (written by the shell script), ``s2-node.tar.gz``, ``s3-copies.tar.gz``,
``s4-gpu-self.tar.gz``, ``summary.json``, ``summary.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from typing import Any, Callable

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import evidence_smi  # noqa: E402

#: copy sizes of the sweep, MiB
SIZES_MIB = (1, 4, 16, 64, 256, 1024)
#: seconds of each stage by default (the shell script's install stage comes before, ~45 s)
STAGE_BUDGET_S = {"node": 80.0, "copies": 140.0, "gpu_self": 75.0}
#: a figure agrees with its independent measure when the ratio lies within this fraction of 1
AGREE_WITHIN = 0.05
#: what each stage's tarball is called in --out
TARBALL = {"node": "s2-node.tar.gz", "copies": "s3-copies.tar.gz", "gpu_self": "s4-gpu-self.tar.gz"}
#: the most bytes of one command's output kept in a stage's log
KEEP_OUTPUT_BYTES = 200_000
#: the name under which the node stage's step records go through redaction with its files
STEPS = "\0steps"


class Evidence:
    """The run: where files go, the deadline, the progress log and the summary kept up to date."""

    def __init__(self, out: pathlib.Path, work: pathlib.Path, repo: pathlib.Path, budget_s: float, dry_run: bool,
                 replay: str | None, smi_xml: str | None, bin_dir: pathlib.Path):
        self.out, self.work, self.repo, self.dry_run = out, work, repo, dry_run
        self.replay, self.smi_xml, self.bin = replay, smi_xml, bin_dir
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s
        self.budget_s = budget_s
        self.summary: dict = {"dry_run": dry_run, "started": _now(), "stages": {}, "node": {}, "agreement": {},
                              "not_run": []}
        if dry_run:
            self.summary["note"] = ("DRY RUN: no GPU was used; ccdiag ran against a recorded snapshot and the CuPy "
                                    "test double, so no figure here is a measurement")
        self.gpus: list[tuple[str, str]] = []  # (label, PCI address), from the live topology
        self.redactor: Any = None  # the node stage's, for every file written after it
        self.node_name = "unknown-node"
        self.stage_dir = work

    # -- logging and commands -------------------------------------------------------------------
    def say(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, file=sys.stderr, flush=True)
        with open(self.out / "progress.log", "a") as fh:
            fh.write(line + "\n")

    def left(self, stage_deadline: float) -> float:
        return max(0.0, min(stage_deadline, self.deadline) - time.monotonic())

    def cmd(self, argv: list[str], timeout: float, stage_deadline: float, name: str | None = None,
            env: dict | None = None, cwd: str | None = None) -> dict:
        """Run ``argv`` (bounded by ``timeout`` and what the stage has left); its stdout into
        ``<name>`` in the stage folder when named; returns rc, duration, stderr tail."""
        limit = min(timeout, self.left(stage_deadline))
        rec: dict = {"argv": argv, "rc": None, "duration_s": 0.0, "timed_out": False, "file": name}
        if limit < 1.0:
            rec["skipped"] = "no time left in the stage's budget"
            self.say(f"skip {' '.join(argv[:4])}: {rec['skipped']}")
            return rec
        self.say("$ " + " ".join(argv))
        t = time.monotonic()
        try:
            p = subprocess.run(argv, capture_output=True, timeout=limit, env=env, cwd=cwd or str(self.work))
            rec["rc"], out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rec["timed_out"], out, err = True, exc.stdout or b"", exc.stderr or b""
        except OSError as exc:
            rec["error"], out, err = f"{type(exc).__name__}: {exc.strerror or exc}", b"", b""
        rec["duration_s"] = round(time.monotonic() - t, 2)
        rec["stderr_tail"] = err[-2000:].decode("utf-8", "replace")
        if name:
            (self.stage_dir / name).write_bytes(out[:KEEP_OUTPUT_BYTES * 50])
        self.say(f"  -> rc {rec['rc']}{' (timed out)' if rec['timed_out'] else ''}{' ' + rec.get('error', '')} "
                 f"in {rec['duration_s']} s")
        return rec

    def ccdiag(self, *args: str, timeout: float, stage_deadline: float, name: str | None = None,
               env: dict | None = None) -> dict:
        return self.cmd([str(self.bin / "ccdiag"), *args], timeout, stage_deadline, name, env)

    def python(self, script: str, *args: str, timeout: float, stage_deadline: float, env: dict | None = None) -> dict:
        return self.cmd([sys.executable, str(HERE / script), *args], timeout, stage_deadline, None, env)

    # -- stages -----------------------------------------------------------------------------------
    def stage(self, name: str, fn: Callable[[float, dict], None]) -> None:
        budget = STAGE_BUDGET_S[name] * self.budget_s / sum(STAGE_BUDGET_S.values())
        stage_deadline = min(time.monotonic() + budget, self.deadline)
        self.stage_dir = self.work / name
        self.stage_dir.mkdir(parents=True, exist_ok=True)
        info: dict = {"budget_s": round(budget, 1), "steps": {}, "status": "ran"}
        self.say(f"== stage {name} (budget {budget:.0f} s)")
        t = time.monotonic()
        try:
            fn(stage_deadline, info)
        except Exception as exc:  # noqa: BLE001 - a stage that breaks leaves its files and the next stage runs
            info["status"] = "error"
            info["error"] = f"{type(exc).__name__}: {exc}"
            self.say(f"stage {name} broke: {info['error']}")
        info["duration_s"] = round(time.monotonic() - t, 1)
        (self.stage_dir / "stage.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")
        if name != "node":
            self.redact_folder()
        elif self.redactor is None:  # broke before its files were redacted: none of them leaves the node
            for p in self.stage_dir.rglob("*"):
                if p.is_file():
                    p.unlink()
            (self.stage_dir / "stage.json").write_text(json.dumps(
                {k: info.get(k) for k in ("status", "error", "duration_s", "budget_s")}, indent=2) + "\n")
        pack(self.stage_dir, self.out / TARBALL[name])
        self.summary["stages"][name] = {k: info[k] for k in ("status", "duration_s", "budget_s") if k in info} | {
            "error": info.get("error"), "file": TARBALL[name]}
        self.write_summary()

    def redact_folder(self) -> None:
        """Every text file of a later stage through the node stage's redactor (the same pseudonyms as
        the committed snapshot: host names and GPU UUIDs in benchmark reports, serials in logs); the
        node stage's own files went through it once, with the snapshot. Without a redactor (the node
        stage broke) the files are dropped rather than sent unredacted."""
        for p in sorted(self.stage_dir.rglob("*")):
            if not p.is_file() or p.suffix == ".gz":
                continue
            if self.redactor is None:
                if p.name != "stage.json":
                    p.unlink()
                continue
            p.write_text(self.redactor.text(p.read_text(errors="replace")))

    def write_summary(self) -> None:
        self.summary["updated"] = _now()
        self.summary["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2, sort_keys=True, default=str) + "\n")
        (self.out / "summary.txt").write_text(summary_text(self.summary))

    # -- environment for the commands ---------------------------------------------------------------
    def engine_env(self) -> dict:
        """The environment of commands that reach the GPU: CUDA numbers devices by PCI address, as NVML."""
        return dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID")

    def fake_env(self, cfg: dict) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.repo / "tests" / "fakes")] +
                                            [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["CCDIAG_FAKE_CUDA"] = json.dumps(cfg)
        return env

    def host_args(self) -> list[str]:
        return ["--replay", self.replay] if self.dry_run and self.replay else []


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def pack(folder: pathlib.Path, tarball: pathlib.Path) -> None:
    """``folder`` as one gzipped tar (its files at the top of the archive), written whole or not at all."""
    tmp = tarball.with_suffix(".part")
    with tarfile.open(tmp, "w:gz") as tar:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                tar.add(p, arcname=str(p.relative_to(folder)))
    tmp.replace(tarball)


# -- the node ------------------------------------------------------------------------------------


def node_name(gpu_name: str | None, count: int, driver: str | None) -> str:
    """``h100-80gb-hbm3-x1-driver580.95.05``: the model as NVML prints it, the count, the driver."""
    model = re.sub(r"[^a-z0-9]+", "-", (gpu_name or "gpu").lower().replace("nvidia", "")).strip("-") or "gpu"
    return f"{model}-x{count}-driver{driver or 'unknown'}"


def probe_nvml(snapshot: str) -> Any:
    """The NVML probe's observation of a recorded snapshot (what the live probe read)."""
    from ccdiag.host.door import ReplayHost
    from ccdiag.probes.registry import run_probes

    run = run_probes(ReplayHost(snapshot), ["nvml"])["nvml"]
    return run.data if run.usable else None


def stage_node(ev: Evidence, deadline: float, info: dict) -> None:
    steps = info["steps"]
    raw_dir = ev.work / "raw"  # unredacted: never leaves the node
    raw_dir.mkdir(exist_ok=True)
    raw = raw_dir / "raw.snap.tar.gz"
    steps["snapshot"] = ev.ccdiag("snapshot", *ev.host_args(), "--window", "5", "-o", str(raw), "--json",
                                  timeout=60, stage_deadline=deadline, name="snapshot-summary.json")
    if not raw.exists():
        raise RuntimeError("ccdiag snapshot wrote no file: nothing to compare or commit")
    replay = ["--replay", str(raw)] if ev.dry_run else []
    steps["check"] = ev.ccdiag("check", *replay, "--json", timeout=45, stage_deadline=deadline, name="check.json")
    steps["topo"] = ev.ccdiag("topo", *replay, "--json", timeout=30, stage_deadline=deadline, name="topo.json")
    steps["daemon_once"] = ev.ccdiag("daemon", *replay, "--once", timeout=45, stage_deadline=deadline,
                                     name="daemon-once.prom")
    smi = shutil.which("nvidia-smi")
    for args, name in ((["-q", "-x"], "nvidia-smi-q.xml"), (["-q"], "nvidia-smi-q.txt"), (["topo", "-m"], "nvidia-smi-topo-m.txt")):
        if smi:
            steps[name] = ev.cmd([smi, *args], 30, deadline, name)
        else:
            steps[name] = {"skipped": "nvidia-smi is not on PATH"}
    if ev.dry_run and ev.smi_xml and not smi:
        shutil.copy(ev.smi_xml, ev.stage_dir / "nvidia-smi-q.xml")
        steps["nvidia-smi-q.xml"] = {"file": "nvidia-smi-q.xml", "dry_run": f"copied from {ev.smi_xml} (not this node)"}
    for argv, name in ((["lscpu"], "lscpu.txt"), (["numactl", "-H"], "numactl-H.txt"), (["uname", "-srvmo"], "uname.txt"),
                       (["cat", "/proc/driver/nvidia/version"], "nvidia-driver-version.txt"),
                       (["nvcc", "--version"], "nvcc-version.txt")):
        steps[name] = ev.cmd(argv, 15, deadline, name) if shutil.which(argv[0]) else {"skipped": f"{argv[0]} not on PATH"}

    # the probe's reading against nvidia-smi's, before anything is redacted
    observation = probe_nvml(str(raw))
    comparison: dict = {"compared": False}
    xml_path = ev.stage_dir / "nvidia-smi-q.xml"
    if observation is None:
        comparison["why_not"] = "the NVML probe read nothing from the snapshot"
    elif not xml_path.exists() or not xml_path.stat().st_size:
        comparison["why_not"] = "no nvidia-smi -q -x output"
    else:
        try:
            comparison = {"compared": True, **evidence_smi.compare(observation, evidence_smi.read_xml(xml_path.read_text()))}
        except ValueError as exc:
            comparison["why_not"] = str(exc)
    if ev.dry_run:
        comparison["dry_run"] = "the snapshot is a recorded sample and the XML another machine's: disagreement is expected"
    gpus = [g for g in getattr(observation, "gpus", ()) if g.bus_id]
    ev.gpus = [(f"GPU{g.index}", g.bus_id) for g in gpus]
    first = gpus[0] if gpus else None
    ev.node_name = node_name(getattr(first, "name", None), len(gpus), getattr(observation, "driver_version", None))
    node = {"name": ev.node_name, "gpus": [g.name for g in gpus], "gpu_count": len(gpus),
            "driver_version": getattr(observation, "driver_version", None),
            "cuda_driver_version": getattr(observation, "cuda_driver_version", None),
            "date": _now(), "commit": commit_of(ev.repo), "python": sys.version.split()[0],
            "libraries": library_versions(), "dry_run": ev.dry_run}
    ev.summary["node"] = node
    ev.summary["agreement"]["fields"] = ({"counts": comparison.get("counts"), "agree": comparison.get("agree")}
                                         if comparison.get("compared") else {"why_not": comparison.get("why_not")})

    # redaction: the snapshot and every text beside it, one set of pseudonyms
    from ccdiag.host.snapshot import SnapshotData
    from ccdiag.report.redact import redact_with_texts

    names = [p.name for p in sorted(ev.stage_dir.iterdir()) if p.is_file() and p.name != "stage.json"]
    texts = {n: (ev.stage_dir / n).read_text(errors="replace") for n in names}
    texts["field-comparison.json"] = json.dumps(comparison, indent=2, sort_keys=True, default=str) + "\n"
    texts["node.json"] = json.dumps(node, indent=2, sort_keys=True) + "\n"
    texts[STEPS] = json.dumps(steps, sort_keys=True, default=str)
    snap, redacted, counts, ev.redactor = redact_with_texts(SnapshotData.load(str(raw)), texts)
    info["steps"] = steps = json.loads(redacted.pop(STEPS))
    for n, text in redacted.items():
        (ev.stage_dir / n).write_text(text)
    snap.save(str(ev.stage_dir / "snapshot.snap.tar.gz"), mode=0o644)
    info["redacted"] = counts
    shutil.rmtree(raw_dir, ignore_errors=True)

    # the redacted snapshot replayed against the live verdict
    steps["replay_check"] = ev.ccdiag("check", "--replay", str(ev.stage_dir / "snapshot.snap.tar.gz"), "--json",
                                      timeout=45, stage_deadline=deadline, name="replay-check.json")
    verdict = compare_verdicts(ev.stage_dir / "check.json", ev.stage_dir / "replay-check.json")
    (ev.stage_dir / "replay-verdict.json").write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")
    ev.summary["agreement"]["replay_verdict"] = {k: verdict.get(k) for k in ("same", "live_exit_code", "replay_exit_code")}


def commit_of(repo: pathlib.Path) -> dict:
    """The ccdiag commit this run is: git where the checkout has its history, else what the
    preparing machine recorded beside the wheels."""
    try:
        p = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if p.returncode == 0 and p.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return {"commit": p.stdout.strip(), "dirty": bool(dirty), "from": "git"}
    except (OSError, subprocess.TimeoutExpired):
        pass
    prepared = repo / "gpu-node" / "PREPARED.json"
    if prepared.exists():
        doc = json.loads(prepared.read_text())
        return {"commit": doc.get("commit"), "dirty": doc.get("dirty"), "from": "gpu-node/PREPARED.json"}
    return {"commit": None, "from": "no git history and no gpu-node/PREPARED.json"}


def library_versions() -> dict:
    from ccdiag.bench.cupy_dist import describe, installed

    out = {"cupy": describe(installed())}
    for mod in ("torch", "pynvml", "numpy"):
        try:
            from importlib import metadata

            dist = {"pynvml": "nvidia-ml-py"}.get(mod, mod)
            out[mod] = metadata.version(dist)
        except Exception:  # noqa: BLE001 - absent: said
            out[mod] = None
    import ccdiag

    out["ccdiag"] = getattr(ccdiag, "__version__", None)
    out["ccdiag_package"] = os.path.dirname(ccdiag.__file__ or "")
    return out


def _verdict(path: pathlib.Path) -> tuple[int | None, set[tuple[str, str, str]]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, set()
    findings = {(f.get("check"), f.get("status"), (f.get("component") or {}).get("name")) for f in doc.get("findings") or []}
    return (doc.get("verdict") or {}).get("exit_code", doc.get("exit_code")), findings


def compare_verdicts(live: pathlib.Path, replay: pathlib.Path) -> dict:
    """The live check and the replay of its snapshot: same exit code, same (check, status, component) set."""
    a_code, a = _verdict(live)
    b_code, b = _verdict(replay)
    return {"live_exit_code": a_code, "replay_exit_code": b_code,
            "same": a_code is not None and a_code == b_code and a == b,
            "only_live": sorted(map(list, a - b)), "only_replay": sorted(map(list, b - a))}


# -- clocks sampled while the GPU works ------------------------------------------------------------


class ClockSampler:
    """NVML read every ``period_s`` in a thread: SM and memory clocks, power, temperature,
    utilisation and the clocks-event reasons of each GPU, one JSON line per GPU and sample."""

    def __init__(self, path: pathlib.Path, period_s: float = 0.2):
        self.path, self.period_s = path, period_s
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.why_not: str | None = None
        self.samples = 0

    def __enter__(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # noqa: BLE001 - no driver (a dry run): said, nothing sampled
            self.why_not = f"NVML not usable here ({type(exc).__name__}: {exc})"
            return self
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def _loop(self) -> None:
        from ccdiag.probes.nvml import clock_event_names

        n = self.nvml
        with open(self.path, "a") as fh:
            while not self.stop_event.wait(self.period_s):
                for i, h in enumerate(self.handles):
                    rec: dict = {"t": round(time.time(), 3), "gpu": i}
                    for key, fn in (("sm_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                                    ("mem_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                                    ("power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
                                    ("temp_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                                    ("util_gpu_pct", lambda: n.nvmlDeviceGetUtilizationRates(h).gpu),
                                    ("reasons", lambda: list(clock_event_names(n.nvmlDeviceGetCurrentClocksEventReasons(h))))):
                        try:
                            rec[key] = fn()
                        except Exception as exc:  # noqa: BLE001 - one value missing is that value's note
                            rec[key] = f"error: {type(exc).__name__}"
                    fh.write(json.dumps(rec) + "\n")
                    self.samples += 1
                fh.flush()

    def __exit__(self, *exc):
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(2.0)
        return False

    def describe(self) -> dict:
        return {"file": self.path.name, "samples": self.samples, "why_not": self.why_not, "period_s": self.period_s}


def clock_digest(path: pathlib.Path) -> dict:
    """Per GPU: the lowest and highest SM clock seen, the most power, and every throttle reason seen."""
    out: dict = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        d = out.setdefault(str(rec.get("gpu")), {"sm_mhz": [], "power_w": [], "reasons": set()})
        for k in ("sm_mhz", "power_w"):
            if isinstance(rec.get(k), (int, float)):
                d[k].append(rec[k])
        if isinstance(rec.get("reasons"), list):
            d["reasons"].update(rec["reasons"])
    return {g: {"sm_mhz_min": min(d["sm_mhz"], default=None), "sm_mhz_max": max(d["sm_mhz"], default=None),
                "power_w_max": max(d["power_w"], default=None), "reasons_seen": sorted(d["reasons"])}
            for g, d in out.items()}


# -- figures -------------------------------------------------------------------------------------


def ccdiag_figures(doc: dict | None) -> dict:
    """``{"h2d:GPU0:<bytes>": GB/s, "gemm:GPU0:fp16": TFLOPS, ...}`` from a ``ccdiag bench --json``
    report: one-way figures from the GPU's own NUMA node."""
    out = {}
    for b in (doc or {}).get("bench") or []:
        for m in b.get("measurements") or []:
            if m.get("direction", "uni") != "uni" or (m.get("extra") or {}).get("remote_numa"):
                continue
            gpu = m.get("dst") if m.get("bench") == "h2d" else m.get("src")
            if m.get("bench") == "gemm" and m.get("tflops"):
                out[f"gemm:{gpu}:fp16"] = m["tflops"]
            elif m.get("gbyte_s"):
                out[f"{m['bench']}:{gpu}:{m.get('size_bytes')}"] = m["gbyte_s"]
    return out


def independent_figures(path: pathlib.Path) -> dict:
    """The ``figures`` of a driver-API or PyTorch document (flattened over GPUs), or {}."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if "gpus" in doc and isinstance(doc["gpus"], dict):
        return {k: v for g in doc["gpus"].values() for k, v in (g.get("figures") or {}).items()}
    return dict(doc.get("figures") or {})


def agreement(ours: dict, measures: dict[str, dict]) -> list[dict]:
    """Each of our figures beside every independent one of the same key: the ratio and whether it
    lies within :data:`AGREE_WITHIN`."""
    rows = []
    for key in sorted(ours, key=_key_order):
        row: dict = {"key": key, "ccdiag": ours[key]}
        for name, figs in measures.items():
            v = figs.get(key)
            row[name] = v
            if v:
                r = ours[key] / v
                row[f"ratio_{name}"] = round(r, 4)
                row[f"agrees_{name}"] = abs(r - 1.0) <= AGREE_WITHIN
        rows.append(row)
    return rows


def _key_order(key: str) -> tuple:
    bench, gpu, size = (key.split(":") + ["", ""])[:3]
    return (bench, gpu, int(size) if size.isdigit() else 0, size)


def _gpu_args(ev: Evidence) -> list[str]:
    return [a for label, bdf in ev.gpus for a in ("--gpu", f"{label}={bdf}")]


def _fake_run(ev: Evidence, names: list[str], size: int, cfg: dict, path: pathlib.Path) -> dict:
    """Dry run only: the engine path (worker, lines, judging, the report's JSON) over the replayed
    snapshot with the CuPy test double; written as what it is, never as a measurement."""
    from ccdiag.bench.registry import BenchContext
    from ccdiag.bench.runner import exit_code, run_benchmarks
    from ccdiag.host.door import ReplayHost
    from ccdiag.run.observe import observe
    from ccdiag.commands.topo import topology_probes

    host = ReplayHost(str(ev.work / "node" / "snapshot.snap.tar.gz"))
    obs = observe(host, topology_probes(), time.monotonic() + 20, close=True)

    class Live:  # the replayed node stands for a live one, so the engine path runs (dry run only)
        live = True

    ctx = BenchContext(host=Live(), topology=obs.topology, runs=obs.runs, size_bytes=size, iters=2,
                       env=ev.fake_env(cfg), deadline=time.monotonic() + 30)
    results = run_benchmarks(names, ctx)
    doc = {"dry_run": "CuPy test double over a recorded snapshot: not a measurement", "exit_code": int(exit_code(results)),
           "bench": [r.to_json() for r in results]}
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    return doc


def _fake_cfg(ev: Evidence) -> dict:
    from ccdiag.host.door import ReplayHost
    from ccdiag.probes.registry import run_probes

    nvml = run_probes(ReplayHost(str(ev.work / "node" / "snapshot.snap.tar.gz")), ["nvml"])["nvml"].data
    devices = [{"bdf": g.bus_id, "name": g.name, "numa": None} for g in nvml.gpus if g.bus_id]
    return {"devices": devices, "h2d": {"default": 50.0}, "d2h": {"default": 50.0}, "d2d": {"default": 1400.0},
            "gemm_tflops": {"default": 700.0}}


def stage_copies(ev: Evidence, deadline: float, info: dict) -> None:
    steps = info["steps"]
    ours: dict = {}
    with ClockSampler(ev.stage_dir / "clocks.jsonl") as sampler:
        for mib in SIZES_MIB:
            size = mib << 20
            name = f"ccdiag-{mib}MiB.json"
            steps[name] = ev.ccdiag("bench", "h2d", "d2h", "d2d", *ev.host_args(), "--size", str(size), "--iters", "5",
                                    "--budget", "60", "--json", timeout=70, stage_deadline=deadline, name=name,
                                    env=ev.engine_env())
            ours.update(ccdiag_figures(_load(ev.stage_dir / name)))
            if ev.dry_run:
                fake = f"dry-run-engine-{mib}MiB.json"
                doc = _fake_run(ev, ["h2d", "d2h", "d2d"], size, _fake_cfg(ev), ev.stage_dir / fake)
                steps[fake] = {"dry_run": "engine path through the CuPy test double", "exit_code": doc["exit_code"]}
        sizes = [str(m) for m in SIZES_MIB]
        steps["driver_api"] = ev.python("copy_driver_api.py", *_gpu_args(ev), "--sizes-mib", *sizes, "--kinds", "h2d",
                                        "d2h", "d2d", "-o", str(ev.stage_dir / "driver-api.json"), timeout=90,
                                        stage_deadline=deadline, env=ev.engine_env())
        steps["torch"] = ev.python("bench_copy_independent.py", "--torch-only", *_gpu_args(ev), "--sizes-mib", *sizes,
                                   "--iters", "5", "-o", str(ev.stage_dir / "torch.json"), timeout=90,
                                   stage_deadline=deadline, env=ev.engine_env())
        steps["nvbandwidth"] = nvbandwidth(ev, deadline)
    info["clocks"] = sampler.describe()
    measures = {"driver_api": independent_figures(ev.stage_dir / "driver-api.json"),
                "torch": independent_figures(ev.stage_dir / "torch.json")}
    if (ev.stage_dir / "nvbandwidth-import.json").exists():
        measures["nvbandwidth"] = {k.rsplit(":", 1)[0] + f":{256 << 20}": v
                                   for k, v in ccdiag_figures(_load(ev.stage_dir / "nvbandwidth-import.json")).items()}
    rows = agreement(ours, measures)
    (ev.stage_dir / "copies-compared.json").write_text(json.dumps({"rows": rows, "clocks": clock_digest(
        ev.stage_dir / "clocks.jsonl"), "agree_within": AGREE_WITHIN}, indent=2, sort_keys=True) + "\n")
    ev.summary["agreement"]["copies"] = rows
    for name, figs in measures.items():
        if not figs:
            ev.summary["not_run"].append(f"copies by {name}: {_why(ev.stage_dir, name)}")


def _why(folder: pathlib.Path, name: str) -> str:
    doc = _load(folder / {"driver_api": "driver-api.json", "torch": "torch.json"}.get(name, f"{name}.json"))
    return str((doc or {}).get("error") or "no figure (see the stage's log)")


def _load(path: pathlib.Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def nvbandwidth(ev: Evidence, deadline: float) -> dict:
    """nvbandwidth's copy-engine tests, when its source sits beside the checkout and builds here."""
    src = ev.repo.parent / "nvbandwidth"
    if not (src / "CMakeLists.txt").exists():
        return {"skipped": f"no nvbandwidth source at {src} (the node has no network to fetch it)"}
    build = ev.work / "nvbandwidth-build"
    for argv, t in ((["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"], 60),
                    (["cmake", "--build", str(build), "-j", str(os.cpu_count() or 4)], 120)):
        rec = ev.cmd(argv, t, deadline)
        if rec.get("rc") != 0:
            return {"skipped": "nvbandwidth did not build here", "build": rec}
    exe = build / "nvbandwidth"
    run = ev.cmd([str(exe), "-t", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_local_copy", "-b", "256"],
                 120, deadline, "nvbandwidth.txt", env=ev.engine_env())
    imp = ev.ccdiag("bench", "import", str(ev.stage_dir / "nvbandwidth.txt"), "--json", timeout=30,
                    stage_deadline=deadline, name="nvbandwidth-import.json")
    return {"run": run, "import": imp}


def stage_gpu_self(ev: Evidence, deadline: float, info: dict) -> None:
    steps = info["steps"]
    with ClockSampler(ev.stage_dir / "clocks.jsonl") as sampler:
        steps["ccdiag"] = ev.ccdiag("bench", "hbm", "gemm", *ev.host_args(), "--budget", "60", "--json", timeout=75,
                                    stage_deadline=deadline, name="ccdiag-self.json", env=ev.engine_env())
        if ev.dry_run:
            doc = _fake_run(ev, ["hbm", "gemm"], 64 << 20, _fake_cfg(ev), ev.stage_dir / "dry-run-engine-self.json")
            steps["dry_run_engine"] = {"dry_run": "engine path through the CuPy test double", "exit_code": doc["exit_code"]}
        steps["driver_api"] = ev.python("copy_driver_api.py", *_gpu_args(ev), "--sizes-mib", "1024", "--kinds", "hbm",
                                        "-o", str(ev.stage_dir / "driver-api.json"), timeout=60, stage_deadline=deadline,
                                        env=ev.engine_env())
        steps["torch"] = ev.python("bench_copy_independent.py", "--torch-only", *_gpu_args(ev), "--sizes-mib", "1",
                                   "--iters", "2", "--gemm-n", "8192", "--gemm-seconds", "3", "-o",
                                   str(ev.stage_dir / "torch.json"), timeout=90, stage_deadline=deadline,
                                   env=ev.engine_env())
    info["clocks"] = sampler.describe()
    ours = {k: v for k, v in ccdiag_figures(_load(ev.stage_dir / "ccdiag-self.json")).items()
            if k.startswith(("hbm:", "gemm:"))}
    measures = {"driver_api": independent_figures(ev.stage_dir / "driver-api.json"),
                "torch": {k: v for k, v in independent_figures(ev.stage_dir / "torch.json").items() if k.startswith("gemm:")}}
    rows = agreement(ours, measures)
    judged = [{"key": f"{m.get('bench')}:{m.get('src')}", "status": m.get("status"), "ratio_of_published": m.get("ratio"),
               "expected": (m.get("expected") or {}).get("bottleneck_desc")}
              for b in (_load(ev.stage_dir / "ccdiag-self.json") or {}).get("bench") or [] for m in b.get("measurements") or []]
    (ev.stage_dir / "self-compared.json").write_text(json.dumps({"rows": rows, "judged": judged, "clocks": clock_digest(
        ev.stage_dir / "clocks.jsonl"), "agree_within": AGREE_WITHIN}, indent=2, sort_keys=True) + "\n")
    ev.summary["agreement"]["gpu_self"] = rows
    ev.summary["agreement"]["gpu_self_judged"] = judged


def summary_text(s: dict) -> str:
    lines = ["ccdiag GPU evidence" + (" -- DRY RUN, nothing here is a measurement" if s.get("dry_run") else ""),
             f"node: {s.get('node', {}).get('name')}  date: {s.get('node', {}).get('date')}  "
             f"commit: {(s.get('node', {}).get('commit') or {}).get('commit')}", ""]
    for name, st in s.get("stages", {}).items():
        lines.append(f"stage {name:9} {st.get('status'):6} {st.get('duration_s')} s of {st.get('budget_s')} s"
                     + (f"  ({st['error']})" if st.get("error") else ""))
    agr = s.get("agreement", {})
    f = agr.get("fields") or {}
    lines += ["", f"probe vs nvidia-smi -q -x: {f.get('counts') or f.get('why_not')}",
              f"replay of the redacted snapshot gives the live verdict: {(agr.get('replay_verdict') or {}).get('same')}", ""]
    for section in ("copies", "gpu_self"):
        for row in agr.get(section) or []:
            parts = [f"{row['key']:28} ccdiag {row['ccdiag']:10.2f}"]
            for name in ("driver_api", "torch", "nvbandwidth"):
                if f"ratio_{name}" in row:
                    mark = "agrees" if row[f"agrees_{name}"] else "DIFFERS"
                    parts.append(f"{name} {row[name]:.2f} ({row[f'ratio_{name}']:.1%}, {mark})")
            if len(parts) == 1:
                parts.append("no independent figure")
            lines.append("  ".join(parts))
    for j in agr.get("gpu_self_judged") or []:
        lines.append(f"{j['key']}: {j['status']} ({j['ratio_of_published']} of {j['expected']})")
    rows = [r for sec in ("copies", "gpu_self") for r in agr.get(sec) or []]
    compared = [v for r in rows for k, v in r.items() if k.startswith("agrees_")]
    lines += ["", f"within {AGREE_WITHIN:.0%} of an independent measure: {sum(compared)} of {len(compared)} comparisons"]
    for why in s.get("not_run") or []:
        lines.append(f"not run: {why}")
    if s.get("note"):
        lines.append(s["note"])
    return "\n".join(lines) + "\n"


def cmd_run(args: argparse.Namespace) -> int:
    out, work = pathlib.Path(args.out).resolve(), pathlib.Path(args.work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    if args.dry_run and not args.replay:
        raise SystemExit("--dry-run needs --replay SNAPSHOT (a recorded node to stand for this one)")
    ev = Evidence(out, work, pathlib.Path(args.repo).resolve(), args.budget_s, args.dry_run, args.replay, args.smi_xml,
                  pathlib.Path(sys.executable).parent)
    ev.say(f"evidence run: budget {args.budget_s:.0f} s, out {out}" + (" (DRY RUN)" if args.dry_run else ""))
    ev.stage("node", lambda d, i: stage_node(ev, d, i))
    if not ev.gpus:
        ev.summary["not_run"].append("copies and gpu_self: no GPU was read by the NVML probe")
        ev.write_summary()
        return 3
    ev.stage("copies", lambda d, i: stage_copies(ev, d, i))
    ev.stage("gpu_self", lambda d, i: stage_gpu_self(ev, d, i))
    ev.summary["finished"] = _now()
    ev.write_summary()
    ev.say("done: " + ", ".join(sorted(p.name for p in out.iterdir())))
    print((out / "summary.txt").read_text())
    return 0


# -- back at the checkout --------------------------------------------------------------------------


def _members(tarball: pathlib.Path) -> dict[str, bytes]:
    out = {}
    with tarfile.open(tarball, "r:gz") as tar:
        for m in tar.getmembers():
            if m.isfile() and not m.name.startswith(("/", "..")) and ".." not in pathlib.PurePosixPath(m.name).parts:
                fh = tar.extractfile(m)
                if fh is not None:
                    out[m.name] = fh.read()
    return out


def cmd_unpack(args: argparse.Namespace) -> int:
    """The returned folder into the places the tests read: ``tests/fixtures/real/<node>/`` (the
    redacted snapshot, the texts beside it, the comparisons) and ``bench/results/engines_real.json``."""
    src, repo = pathlib.Path(args.folder), pathlib.Path(args.repo).resolve()
    summary = _load(src / "summary.json")
    if summary is None:
        print(f"{src}: no summary.json: not a folder the evidence script wrote", file=sys.stderr)
        return 2
    if summary.get("dry_run") and not args.allow_dry_run:
        print(f"{src}: a dry run: its files are not evidence (--allow-dry-run to unpack it anyway, e.g. in a test)",
              file=sys.stderr)
        return 2
    name = (summary.get("node") or {}).get("name") or "unknown-node"
    dest = repo / "tests" / "fixtures" / "real" / name
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    stages = {}
    for stage, tarball in TARBALL.items():
        if (src / tarball).exists():
            stages[stage] = _members(src / tarball)
    for fname, data in sorted((stages.get("node") or {}).items()):
        (dest / fname).write_bytes(data)
        written.append(dest / fname)
    for stage in ("copies", "gpu_self"):
        for fname, data in sorted((stages.get(stage) or {}).items()):
            target = dest / stage / fname
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(data)
            written.append(target)
    if (src / "s1-install.tar.gz").exists():
        for fname, data in _members(src / "s1-install.tar.gz").items():
            target = dest / "install" / fname
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(data)
            written.append(target)
    for extra in ("summary.json", "summary.txt", "progress.log"):
        if (src / extra).exists():
            shutil.copy(src / extra, dest / extra)
            written.append(dest / extra)
    result = {"node": summary.get("node"), "evidence": str(dest.relative_to(repo)), "stages": summary.get("stages"),
              "agree_within": AGREE_WITHIN, "copies": (summary.get("agreement") or {}).get("copies"),
              "gpu_self": (summary.get("agreement") or {}).get("gpu_self"),
              "gpu_self_judged": (summary.get("agreement") or {}).get("gpu_self_judged"),
              "fields": (summary.get("agreement") or {}).get("fields"),
              "replay_verdict": (summary.get("agreement") or {}).get("replay_verdict"),
              "not_run": summary.get("not_run"), "dry_run": summary.get("dry_run")}
    results = pathlib.Path(args.results) if args.results else repo / "bench" / "results" / "engines_real.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    written.append(results)
    for p in written:
        print(p.relative_to(repo) if p.is_relative_to(repo) else p)
    return 0


def tree_path(member: str) -> str:
    """Where a file of the installed package lives in the source tree (``package-dir`` in pyproject.toml)."""
    for pkg, folder in (("ccdiag/probes/", "probes/"), ("ccdiag/exporters/", "exporters/")):
        if member.startswith(pkg):
            return folder + member[len(pkg):]
    return member


def cmd_check_wheel(args: argparse.Namespace) -> int:
    """Is the carried ccdiag wheel this tree? Every file of the package in the wheel's RECORD against
    the checkout's file (sha256); exit 1 naming the files that differ. Standard library only: the
    node's own Python runs it before anything is installed."""
    import base64
    import hashlib
    import zipfile

    folder, repo = pathlib.Path(args.wheels), pathlib.Path(args.repo)
    wheels = sorted(folder.glob("ccdiag-*.whl"))
    if not wheels:
        print(f"no ccdiag wheel in {folder}", file=sys.stderr)
        return 1
    differ, checked = [], 0
    with zipfile.ZipFile(wheels[-1]) as whl:
        record = next(n for n in whl.namelist() if n.endswith(".dist-info/RECORD"))
        for line in whl.read(record).decode().splitlines():
            parts = line.rsplit(",", 2)
            if len(parts) != 3 or not parts[1].startswith("sha256=") or not parts[0].startswith("ccdiag/"):
                continue
            if parts[0] == "ccdiag/_build_commit.txt":
                continue
            local = repo / tree_path(parts[0])
            digest = base64.urlsafe_b64encode(hashlib.sha256(local.read_bytes()).digest()).rstrip(b"=").decode() \
                if local.exists() else None
            checked += 1
            if digest != parts[1][len("sha256="):]:
                differ.append(parts[0] + ("" if local.exists() else " (not in the tree)"))
    print(f"{wheels[-1].name}: {checked} files checked against {repo}, {len(differ)} differ")
    for d in differ[:50]:
        print(f"  differs: {d}")
    return 1 if differ else 0


def cmd_worker_check(args: argparse.Namespace) -> int:
    """Start the CuPy worker the way ``ccdiag bench`` does, from the current directory (the shell
    script runs this from the checkout's root): it must import the installed ccdiag, so whatever it
    answers (its devices, or that CUDA is not usable here) is not an import error."""
    import ccdiag
    from ccdiag.bench.engine import run_worker

    run = run_worker({"tasks": [], "gpus": []}, 60.0, env=dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID"))
    doc = {"cwd": os.getcwd(), "parent_package": os.path.dirname(ccdiag.__file__ or ""), "info": run.info,
           "fatal": run.fatal, "done": run.done, "returncode": run.returncode, "stderr_tail": run.stderr_tail}
    print(json.dumps(doc, indent=2, sort_keys=True))
    broken = "ModuleNotFoundError" in (run.stderr_tail or "") + (run.fatal or "")
    return 1 if broken or (not run.done and not run.fatal) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run", help="record the evidence on this node")
    run.add_argument("--out", required=True, help="the folder that comes back from the node")
    run.add_argument("--work", required=True, help="scratch space (raw, unredacted files stay here)")
    run.add_argument("--repo", default=str(HERE.parent))
    run.add_argument("--budget-s", type=float, default=300.0, help="seconds for these stages together")
    run.add_argument("--dry-run", action="store_true", help="no GPU: a recorded snapshot and the CuPy test double")
    run.add_argument("--replay", help="dry run: the snapshot that stands for this node")
    run.add_argument("--smi-xml", help="dry run: an nvidia-smi -q -x output to compare with, when nvidia-smi is absent")
    run.set_defaults(fn=cmd_run)
    unpack = sub.add_parser("unpack", help="the returned folder -> tests/fixtures/real/<node>/ and bench/results/")
    unpack.add_argument("folder")
    unpack.add_argument("--repo", default=str(HERE.parent))
    unpack.add_argument("--results", help="where the figures go [bench/results/engines_real.json]")
    unpack.add_argument("--allow-dry-run", action="store_true")
    unpack.set_defaults(fn=cmd_unpack)
    check = sub.add_parser("check-wheel", help="is the carried ccdiag wheel built from this tree?")
    check.add_argument("wheels")
    check.add_argument("--repo", default=str(HERE.parent))
    check.set_defaults(fn=cmd_check_wheel)
    worker = sub.add_parser("worker-check", help="start the CuPy worker from the current directory")
    worker.set_defaults(fn=cmd_worker_check)
    args = ap.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
