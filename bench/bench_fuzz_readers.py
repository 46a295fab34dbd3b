"""Fuzzing every reader of a file a user hands ccdiag: internal errors counted per reader.

    python bench/bench_fuzz_readers.py [--per-reader 10000] [--seed 1] [--only READER ...]

Why: exit 4 means a bug in ccdiag, and the inputs behind the ones found so far were all files a
user can hand it: a benchmark output cut mid-row, a policy with a 5,000-digit integer, a snapshot
listing an empty device name. Each reader here is given mutations of real inputs, written to a file
and read the way the command line reads it (through :mod:`ccdiag.core.userfiles`, the one bounded
reader), and each outcome is classed: ``result`` (read), ``refused`` (the reader's documented
error: what the command line turns into exit 2 with one line), ``internal`` (any other exception:
exit 4), ``slow`` (more than 10 s on one input).

Readers and seeds (nothing synthesized as a seed; the mutations are random):

* ``bench_import_<format>``: ``ccdiag bench import`` parsing, one reader per format, seeds
  tests/fixtures/corpus nccl-tests, nvbandwidth and perftest outputs (each with its source in the
  corpus index);
* ``topo_paste``: ``nvidia-smi topo -m`` / ``-p2p`` pastes (``ccdiag topo --paste``), seeds the
  corpus topo-m and topo-p2p outputs;
* ``web_config``: ``load_web_config`` of ``--web.config.file``, seeds the exporter-toolkit format as
  documented, with YAML-level damage besides the text mutations (deep nesting, aliases, other types,
  CR/LF in header values);
* ``policy``: ``load_policy``, seeds ``ccdiag policy init`` of the two bundled real samples;
* ``daemon_config``: ``load_config``, seed systemd/daemon.toml;
* ``env_file``: ``load_env_file``, seeds ``ccdiag nccl --format env`` of the bundled samples and the
  NCCL_* settings the corpus NCCL logs report;
* ``nccl_log``: ``parse_nccl_log`` of ``ccdiag nccl --log``, seeds the corpus NCCL logs;
* ``compare_report``: ``ccdiag compare``'s reading and scan of a JSON report, seeds
  ``ccdiag check --json`` of the bundled samples (text and JSON-level mutations);
* ``snapshot``: ``ccdiag check --replay FILE --json`` done in this process (load, replayed
  evaluation, JSON report), seeds the bundled samples and the mock-NVML recordings, each in both
  snapshot formats, damaged at the gzip, tar, meta JSON, other JSON and file-content levels
  (bench/fuzz_snapshots.py); a probe that died of an exception is counted as ``probe_crash``.

Mutations: character flips, cut and duplicated spans, swapped and dropped lines, truncation, huge
repeats, 5,000-digit integers, values of another JSON type, deep nesting. Writes
bench/results/fuzz_readers.json with the counts per reader and the first failing inputs (base64).
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "tests"))
RESULTS = os.path.join(REPO, "bench", "results", "fuzz_readers.json")
SAMPLES = sorted(glob.glob(os.path.join(REPO, "samples", "*.snap.tar.gz")))
CORPUS = os.path.join(REPO, "tests", "fixtures", "corpus")
SLOW_S = 10

import fuzz_snapshots  # noqa: E402 - beside this script
from bench_fuzz import mutate_json, mutate_text  # noqa: E402 - beside this script

HUGE_INT = "9" * 5000
#: an integer Python reads but no float holds (the policy's float fields once died of it)
FLOATLESS_INT = "9" * 400


class _Slow(Exception):
    pass


class _ProbeCrash(Exception):
    """The replayed check gave its report, but a probe in it died of an exception."""


def _alarm(_sig, _frame):
    raise _Slow()


def _ccdiag(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ccdiag", *args], capture_output=True, text=True, timeout=300,
                         cwd=tempfile.gettempdir())
    return out.stdout


def _corpus(*patterns: str) -> list[str]:
    texts = []
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(CORPUS, pattern))):
            with open(path, encoding="utf-8", errors="replace") as fh:
                texts.append("".join(ln for ln in fh if not ln.startswith("#ccdiag-")))
    return texts


#: the documented shape of an exporter-toolkit web config (exporters/webconfig.py's docstring and the
#: toolkit's docs/web-configuration.md): TLS, headers, users; relative paths resolve beside the file
WEB_CONFIG_SEEDS = [
    "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS12\n"
    "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    Strict-Transport-Security: max-age=31536000\n"
    "basic_auth_users:\n  prometheus: $2b$10$A4Q1bH9R5VTiMjlINiOfUueDEnst0a59t3KaeEX9kUzEeTrSbSzWC\n",
    "http_server_config:\n  headers:\n    Content-Security-Policy: \"default-src 'self'\"\n"
    "basic_auth_users:\n  alice: $2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n",
    "tls_server_config:\n  cert_file: /nonexistent/server.crt\n  key_file: /nonexistent/server.key\n"
    "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
]
#: YAML-level damage the text mutations do not reach: nesting, aliases, other types, header injection
YAML_JUNK = ["[" * 5000 + "]" * 5000, "{a: " * 3000 + "1" + "}" * 3000, "&a [*a]", "x: &a {y: *a}",
             "headers: [a, b]", "headers: {X: \"a\\r\\nSet-Cookie: x\"}", "headers: {\"X\\nY\": z}",
             "2001-13-45", "!!binary zzz", "!!python/object:os.system ls", "? [a]\n: b", "9" * 5000,
             "headers: {X: [1, [2, [3]]]}", "basic_auth_users: {\"a:b\": $2b$10$x}", "--- a\n--- b"]


def seeds(only: list[str] | None = None) -> dict[str, list]:
    """Each reader's seeds (only those in ``only``: some are made by running ccdiag)."""
    def wanted(name: str) -> bool:
        return only is None or name in only

    out: dict[str, list] = {}
    for fmt in ("nccl-tests", "nvbandwidth", "perftest"):
        if wanted(f"bench_import_{fmt}"):
            out[f"bench_import_{fmt}"] = _corpus(f"{fmt}/*.txt")
    if wanted("topo_paste"):
        out["topo_paste"] = [("m", t) for t in _corpus("topo-m/*.txt")] + [("p2p", t) for t in _corpus("topo-p2p/*.txt")]
    if wanted("policy"):
        out["policy"] = [_ccdiag("policy", "init", "--replay", s) for s in SAMPLES]
    if wanted("daemon_config"):
        out["daemon_config"] = [open(os.path.join(REPO, "systemd", "daemon.toml")).read()]
    if wanted("web_config"):
        out["web_config"] = list(WEB_CONFIG_SEEDS)
    if wanted("env_file"):
        env_from_logs = []
        for log in _corpus("nccl-log/*.txt"):
            pairs = re.findall(r"\b(NCCL_[A-Z0-9_]+) set by environment to (\S+)", log)
            if pairs:
                env_from_logs.append("".join(f"{k}={v}\n" for k, v in pairs))
        out["env_file"] = [_ccdiag("nccl", "--replay", s, "--format", "env") for s in SAMPLES] + env_from_logs
    if wanted("nccl_log"):
        out["nccl_log"] = _corpus("nccl-log/*.txt")
    if wanted("compare_report"):
        out["compare_report"] = [_ccdiag("check", "--replay", s, "--json") for s in SAMPLES]
    if wanted("snapshot"):
        out["snapshot"] = fuzz_snapshots.load_seeds()
    return out


#: every reader, in the order they run
READERS = ("bench_import_nccl-tests", "bench_import_nvbandwidth", "bench_import_perftest", "topo_paste", "policy",
           "daemon_config", "web_config", "env_file", "nccl_log", "compare_report", "snapshot")


def mutate_toml(rng: random.Random, text: str) -> str:
    text = mutate_text(rng, text)
    if rng.random() < 0.2:  # a number beyond Python's int-conversion limit
        nums = list(re.finditer(r"(?<![\w.])\d+(?![\w.])", text))
        if nums:
            m = rng.choice(nums)
            text = text[:m.start()] + rng.choice((HUGE_INT, FLOATLESS_INT)) + text[m.end():]
        else:
            text += f"\nx = {HUGE_INT}\n"
    return text


def mutate_yaml(rng: random.Random, text: str) -> str:
    text = mutate_text(rng, text)
    if rng.random() < 0.3:
        lines = text.split("\n")
        k = rng.randrange(len(lines) + 1)
        indent = " " * rng.choice((0, 2, 4))
        lines[k:k] = [indent + rng.choice(YAML_JUNK)]
        text = "\n".join(lines)
    return text


def mutate(reader: str, rng: random.Random, seed):
    if reader == "snapshot":
        return fuzz_snapshots.mutate(rng, seed)
    if reader == "topo_paste":
        kind, text = seed
        return f"{kind}\n" + mutate_text(rng, text)
    if reader == "web_config":
        return mutate_yaml(rng, seed)
    if reader == "compare_report" and rng.random() < 0.5:
        return mutate_json(rng, seed.encode()).decode("utf-8", "replace")
    if reader in ("policy", "daemon_config"):
        return mutate_toml(rng, seed)
    text = mutate_text(rng, seed)
    if rng.random() < 0.1:  # a 5,000-digit number in place of one
        nums = list(re.finditer(r"\d+", text))
        if nums:
            m = rng.choice(nums)
            text = text[:m.start()] + HUGE_INT + text[m.end():]
    return text


def read(reader: str, path: str) -> str:
    """One read the way the command line does it; "result" or "refused" (anything else raises)."""
    from ccdiag.core.userfiles import UserFileError, read_user_text

    try:
        if reader.startswith("bench_import_"):
            from ccdiag.benchparse.detect import parse_any
            from ccdiag.benchparse.errors import BenchParseError

            try:
                parse_any(read_user_text(path, "benchmark output"))
            except BenchParseError:
                return "refused"
        elif reader == "policy":
            from ccdiag.inputs.policy import PolicyError, load_policy

            try:
                load_policy(path)
            except PolicyError:
                return "refused"
        elif reader == "topo_paste":
            from bench_fuzz import run_parser

            kind, _, text = read_user_text(path, "topology paste").partition("\n")
            return "refused" if run_parser(kind, text) == "refused" else "result"
        elif reader == "web_config":
            from ccdiag.exporters.webconfig import WebConfigError, load_web_config

            try:
                load_web_config(path)
            except WebConfigError:
                return "refused"
        elif reader == "daemon_config":
            from ccdiag.exporters.daemon import ConfigError, load_config

            try:
                load_config(path, {})
            except ConfigError:
                return "refused"
        elif reader == "env_file":
            from ccdiag.inputs.envfile import EnvFileError, load_env_file

            try:
                load_env_file(path)
            except EnvFileError:
                return "refused"
        elif reader == "nccl_log":
            from ccdiag.nccl.logread import LogError, parse_nccl_log

            try:
                parse_nccl_log(read_user_text(path, "NCCL log"), path)
            except LogError:
                return "refused"
        elif reader == "compare_report":
            from ccdiag.cluster import compare

            try:
                doc = compare.load(path)
                compare.flatten(doc)
                compare.scan([path])
            except ValueError:
                return "refused"
        elif reader == "snapshot":
            outcome, crash = fuzz_snapshots.check(path)
            if crash:
                raise _ProbeCrash(crash)
            return outcome
        return "result"
    except UserFileError:
        return "refused"


def fuzz(reader: str, seed_list: list, n: int, rng: random.Random, tmp: str) -> dict:
    counts = {"result": 0, "refused": 0, "internal": 0, "slow": 0, "probe_crash": 0}
    failures, slowest, levels = [], (0.0, None), {}
    path = os.path.join(tmp, f"input-{reader}")
    for i in range(n):
        seed = seed_list[i % len(seed_list)]
        data = mutate(reader, rng, seed)
        if isinstance(data, tuple):  # (input, the level it was damaged at)
            data, level = data
            levels[level] = levels.get(level, 0) + 1
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        with open(path, "wb") as fh:
            fh.write(raw)
        t0 = time.perf_counter()
        signal.alarm(SLOW_S)
        try:
            outcome = read(reader, path)
        except _ProbeCrash as exc:
            outcome = "probe_crash"
            if len(failures) < 5:
                failures.append({"error": str(exc), "where": "probe", "input_b64": base64.b64encode(raw[:200000]).decode()})
        except _Slow:
            outcome = "slow"
            if len(failures) < 5:
                failures.append({"error": f"slower than {SLOW_S} s", "where": "",
                                 "input_b64": base64.b64encode(raw[:200000]).decode()})
        except Exception as exc:  # noqa: BLE001 - what the fuzzing is for
            outcome = "internal"
            if len(failures) < 5:
                failures.append({"error": f"{type(exc).__name__}: {str(exc)[:300]}",
                                 "where": traceback.format_exc().strip().splitlines()[-3][:300],
                                 "input_b64": base64.b64encode(raw[:20000]).decode()})
        finally:
            signal.alarm(0)
        dt = time.perf_counter() - t0
        if dt > slowest[0]:
            slowest = (dt, i)
        counts[outcome] += 1
    out = {"inputs": n, "seeds": len(seed_list), **counts, "slowest_s": round(slowest[0], 3),
           "first_failures": failures}
    if levels:
        out["inputs_by_level"] = levels
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-reader", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--snapshots", type=int, default=None,
                    help="inputs for the snapshot reader (default --per-reader; about 0.1 s each)")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    all_seeds = seeds(args.only)
    results = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for reader, seed_list in all_seeds.items():
            seed_list = [s for s in seed_list if s]
            started = time.monotonic()
            n = args.snapshots if reader == "snapshot" and args.snapshots is not None else args.per_reader
            results[reader] = fuzz(reader, seed_list, n, random.Random(f"{args.seed}-{reader}"), tmp)
            results[reader]["wall_s"] = round(time.monotonic() - started, 1)
            print(reader, {k: v for k, v in results[reader].items() if k != "first_failures"}, flush=True)
    from results_file import write_result

    command = "python bench/bench_fuzz_readers.py " + " ".join(sys.argv[1:])
    for r in results.values():
        r["command"] = command
    if args.only and os.path.exists(RESULTS):  # re-running some readers keeps the others' figures
        with open(RESULTS) as fh:
            results = {**json.load(fh).get("readers", {}), **results}
    doc = {"command": command, "seed": args.seed, "wall_s": round(time.monotonic() - t0, 1),
           "internal_errors": sum(r["internal"] for r in results.values()),
           "probe_crashes": sum(r.get("probe_crash", 0) for r in results.values()), "readers": results,
           "host": {"python": platform.python_version(), "cpus": os.cpu_count()}}
    write_result(RESULTS, doc, echo=False)
    print(json.dumps({k: v for k, v in doc.items() if k != "readers"}))
    return 1 if doc["internal_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
