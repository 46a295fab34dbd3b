"""Fuzzing run: thousands of mutated parser inputs and corrupted snapshots, outcomes by class.

    python bench/bench_fuzz.py [--parsers 10000] [--snapshots 2000] [--seed 1]

Why: ccdiag reads what strangers paste into tickets and snapshots from other sites. Every input
must end in a result or the documented refusal (``TopoParseError`` for a paste; exit 2 for a
snapshot), never an internal error (exit 4) and never a long stall. The seeds are the real corpus
(tests/fixtures/corpus/topo-m, topo-p2p, the topo -c query, tests/fixtures/kmsg) and the bundled
samples (samples/*.snap.tar.gz); each input is one seed with a few random mutations (byte flips,
cut spans, duplicated or swapped lines, tabs expanded or collapsed, huge repeats; for snapshots
also truncation, member deletion, JSON values swapped to another type, deep nesting, huge strings,
a device renamed in one member only). Snapshots are judged through the CLI in-process
(``ccdiag check --replay``). Reports inputs tried, outcomes by class, the slowest input, and
writes bench/results/fuzz.json (with the first few failing inputs, base64, for reproduction).
"""

from __future__ import annotations

import argparse
import base64
import glob
import gzip
import io
import json
import os
import platform
import random
import signal
import sys
import tarfile
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
RESULTS = os.path.join(REPO, "bench", "results", "fuzz.json")
PER_INPUT_LIMIT_S = 30


class _Timeout(Exception):
    pass


def _alarm(_sig, _frame):
    raise _Timeout()


# -- parser inputs -------------------------------------------------------------------------------
def parser_seeds() -> list[tuple[str, str, str]]:
    """(kind, name, text) from the corpus; "#ccdiag-" provenance lines removed."""
    out = []
    corpus = os.path.join(REPO, "tests", "fixtures", "corpus")
    for kind, pattern in (("m", "topo-m/*.txt"), ("p2p", "topo-p2p/*.txt"), ("kmsg", "../kmsg/*")):
        for path in sorted(glob.glob(os.path.join(corpus, pattern))):
            if os.path.isdir(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = "".join(ln for ln in fh if not ln.startswith("#ccdiag-"))
            k = "c" if "topo-c" in path else kind
            out.append((k, os.path.basename(path), text))
    return out


JUNK = ["\t", " ", "\n", "\r", "X", "NV18", "PXB", "SYS", "GPU0", "NIC0", "mlx5_0", "=", ":", ",", "-",
        "0", "9" * 40, "\x1b[31m", "\u2026", ". . .", "\x00", "CPU Affinity", "Legend:", "NIC Legend:",
        "The GPUs that have an affinity with CPU 0 are:", "NVRM: Xid (PCI:0000:18:00): ", "²", "\u00a0"]


def mutate_text(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(11)
        n = len(text)
        p = rng.randrange(n + 1)
        if op == 0 and n:  # flip a character
            text = text[:p] + chr(rng.randrange(1, 0x250)) + text[p + 1:]
        elif op == 1:  # cut a span
            text = text[:p] + text[p + rng.randint(1, 40):]
        elif op == 2:  # insert junk
            text = text[:p] + rng.choice(JUNK) + text[p:]
        elif op == 3:  # duplicate a span
            q = min(n, p + rng.randint(1, 200))
            text = text[:q] + text[p:q] * rng.randint(1, 3) + text[q:]
        elif op == 4:  # swap two lines
            lines = text.split("\n")
            if len(lines) > 2:
                a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
                lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        elif op == 5:
            text = text.expandtabs(rng.choice((4, 8)))
        elif op == 6:
            text = " ".join(text.split(" "))
            text = text.replace("\t", " ")
        elif op == 7:  # truncate
            text = text[:p]
        elif op == 8:  # a huge repeat of one piece
            piece = rng.choice(JUNK + [text[p:p + 10] or "x"])
            text = text[:p] + piece * rng.choice((100, 5000, 50000)) + text[p:]
        elif op == 9:  # drop a line
            lines = text.split("\n")
            if lines:
                del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        else:  # repeat a line many times
            lines = text.split("\n")
            if lines:
                k = rng.randrange(len(lines))
                lines[k:k + 1] = [lines[k]] * rng.choice((2, 50, 2000))
            text = "\n".join(lines)
    return text


def run_parser(kind: str, text: str) -> str:
    from ccdiag.probes import kmsg
    from ccdiag.probes.smi_topo import TopoParseError, parse_topo_cpu_query, parse_topo_matrix, parse_topo_p2p
    from ccdiag.probes.smi_topo import render_matrix, rows_for_table

    try:
        if kind == "m":
            m = parse_topo_matrix(text)
            rows_for_table(m)
            render_matrix(m)
            for a in m.devices[:4]:
                for b in m.devices[:4]:
                    m.nvlinks(a, b)
        elif kind == "p2p":
            parse_topo_p2p(text)
        elif kind == "c":
            parse_topo_cpu_query(text)
        else:
            kmsg.parse_lines(text.splitlines())
        return "result"
    except TopoParseError:
        return "refused"


# -- snapshots -----------------------------------------------------------------------------------
def _read_members(data: bytes) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    out = []
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), mode="r:") as tar:
        for m in tar:
            fh = tar.extractfile(m) if m.isfile() else None
            out.append((m, fh.read() if fh else None))
    return out


def _write_members(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info = tarfile.TarInfo(info.name) if False else info
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return gzip.compress(buf.getvalue(), mtime=0)


def _deep(rng: random.Random):
    depth = rng.choice((50, 500, 5000, 100000))
    return json.loads("[" * depth + "]" * depth) if depth < 900 else None


def _swap_value(rng: random.Random, value):
    choices = [None, True, 0, -1, 2 ** 70, 1.5, 1e308, "x", "", "\x1b[2J\x1b]0;pwned\x07", "9" * 5000,
               "x" * rng.choice((10, 100000)), [], {}, [1, "a"], {"k": "v"}]
    return rng.choice(choices)


def _json_paths(doc, path=(), out=None, limit=4000):
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    out.append(path)
    if isinstance(doc, dict):
        for k in list(doc)[:200]:
            _json_paths(doc[k], path + (k,), out, limit)
    elif isinstance(doc, list):
        for k in range(min(len(doc), 200)):
            _json_paths(doc[k], path + (k,), out, limit)
    return out


def _set_path(doc, path, value):
    if not path:
        return value
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return doc


def mutate_json(rng: random.Random, raw: bytes) -> bytes:
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw
    paths = _json_paths(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        op = rng.randrange(4)
        try:
            if op == 0:
                doc = _set_path(doc, path, _swap_value(rng, None))
            elif op == 1 and path:  # delete a key or item
                cur = doc
                for k in path[:-1]:
                    cur = cur[k]
                del cur[path[-1]]
            elif op == 2:  # deep nesting, written as text below
                depth = rng.choice((40, 200, 990, 5000, 100000))
                text = json.dumps(doc)
                marker = '"__DEEP__"'
                doc = _set_path(doc, path, "__DEEP__")
                text = json.dumps(doc).replace(marker, "[" * depth + "]" * depth, 1)
                return text.encode()
            else:  # huge string
                doc = _set_path(doc, path, "A" * rng.choice((1000, 1_000_000)))
        except (KeyError, IndexError, TypeError):
            continue
        paths = _json_paths(doc)
    return json.dumps(doc).encode()


def mutate_snapshot(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    op = rng.randrange(10)
    if op == 0:  # flip one byte of the file
        p = rng.randrange(len(data))
        return data[:p] + bytes([data[p] ^ (1 << rng.randrange(8))]) + data[p + 1:], "byte flip"
    if op == 1:  # truncate the file
        return data[:rng.randrange(len(data))], "file truncated"
    members = _read_members(data)
    raw_tar = gzip.decompress(data)
    if op == 2:  # tar cut mid-member or mid-header, recompressed (a valid gzip around a bad tar)
        return gzip.compress(raw_tar[:rng.randrange(len(raw_tar))], mtime=0), "tar truncated"
    if op == 3:  # trailing garbage after the tar, recompressed
        return gzip.compress(raw_tar + os.urandom(rng.choice((1, 600, 5000))), mtime=0), "tar trailing garbage"
    if op == 4:  # delete a member
        k = rng.randrange(len(members))
        return _write_members(members[:k] + members[k + 1:]), f"member deleted: {members[k][0].name}"
    if op == 5:  # flip a byte inside the uncompressed tar, recompressed
        p = rng.randrange(len(raw_tar))
        return gzip.compress(raw_tar[:p] + bytes([raw_tar[p] ^ 0xFF]) + raw_tar[p + 1:], mtime=0), "tar byte flip"
    if op == 6:  # rename a device in one member only
        old, new = rng.choice((("mlx5_0", "mlx5_9"), ("mlx5_3", "mlx5_77"), ("GPU0", "GPU42"), ("0000:18:00", "0000:99:00")))
        k = rng.choice([i for i, (m, d) in enumerate(members) if d is not None])
        info, d = members[k]
        members[k] = (info, d.replace(old.encode(), new.encode()))
        return _write_members(members), f"renamed {old} in {info.name}"
    if op == 7:  # a sysfs file's content replaced
        k = rng.choice([i for i, (m, d) in enumerate(members) if d is not None])
        info, d = members[k]
        members[k] = (info, rng.choice((b"", b"\xff\xfe", b"9" * 5000, b"-1\n", b"nan\n", b"0x" + b"f" * 40, d[:len(d) // 2])))
        return _write_members(members), f"content of {info.name}"
    # JSON members: type swaps, deletions, deep nesting, huge strings
    jsons = [i for i, (m, d) in enumerate(members) if m.name.endswith(".json")]
    k = rng.choice(jsons)
    info, d = members[k]
    members[k] = (info, mutate_json(rng, d))
    return _write_members(members), f"json {info.name}"


_CRASH_RE = None


def run_snapshot(path: str) -> str:
    """The exit code, or "<code>+probe-crash" when the verdict came but a probe or check died of
    an exception (a value of the wrong type that reached code not written for it)."""
    import re

    from cli_runner import run

    global _CRASH_RE
    if _CRASH_RE is None:
        _CRASH_RE = re.compile(r"\b(AttributeError|TypeError|KeyError|IndexError|OverflowError|RecursionError|"
                               r"ZeroDivisionError|UnicodeDecodeError|ValueError)\b")
    code, out, err = run("check", "--replay", path, "--json")
    if code in (0, 1, 3) and _CRASH_RE.search(out):
        return f"{code}+probe-crash"
    return str(code)


def _CRASH_RE_LINES(out: str) -> list[str]:
    return [ln.strip()[:160] for ln in out.splitlines() if _CRASH_RE.search(ln)]


# -- main ----------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parsers", type=int, default=10_000)
    ap.add_argument("--snapshots", type=int, default=2_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    os.environ.setdefault("CCDIAG_DEBUG", "")
    rng = random.Random(args.seed)
    signal.signal(signal.SIGALRM, _alarm)
    started = time.monotonic()
    report: dict = {"seed": args.seed, "python": platform.python_version(), "cpus": os.cpu_count()}

    seeds = parser_seeds()
    outcomes: dict[str, int] = {}
    slowest = {"elapsed_s": 0.0}
    failures: list[dict] = []
    for n in range(args.parsers):
        kind, name, seed_text = rng.choice(seeds)
        text = mutate_text(rng, seed_text)
        signal.alarm(PER_INPUT_LIMIT_S)
        t0 = time.perf_counter()
        try:
            outcome = run_parser(kind, text)
        except _Timeout:
            outcome = "timeout"
        except Exception as exc:  # noqa: BLE001 - every class counted
            outcome = f"internal {type(exc).__name__}"
            if len(failures) < 10:
                failures.append({"seed": name, "kind": kind, "error": f"{type(exc).__name__}: {exc}"[:300],
                                 "where": traceback.format_exc().splitlines()[-3][:200],
                                 "input_b64": base64.b64encode(text.encode()[:20000]).decode()})
        finally:
            signal.alarm(0)
        elapsed = time.perf_counter() - t0
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if elapsed > slowest["elapsed_s"]:
            slowest = {"elapsed_s": round(elapsed, 4), "seed": name, "kind": kind, "input_chars": len(text),
                       "outcome": outcome}
    report["parsers"] = {"inputs": args.parsers, "seeds": len(seeds), "outcomes": outcomes, "slowest": slowest,
                         "internal_errors": sum(v for k, v in outcomes.items() if k.startswith("internal")),
                         "first_failures": failures}
    print(json.dumps({k: v for k, v in report["parsers"].items() if k != "first_failures"}, indent=1), flush=True)

    samples = sorted(glob.glob(os.path.join(REPO, "samples", "*.snap.tar.gz")))
    sample_bytes = [(os.path.basename(p), open(p, "rb").read()) for p in samples]
    codes: dict[str, int] = {}
    by_mutation: dict[str, dict[str, int]] = {}
    slowest = {"elapsed_s": 0.0}
    failures = []
    tmp = tempfile.mkdtemp(prefix="ccdiag-fuzz-")
    path = os.path.join(tmp, "fuzzed.snap.tar.gz")
    for n in range(args.snapshots):
        name, data = rng.choice(sample_bytes)
        mutated, what = mutate_snapshot(rng, data)
        with open(path, "wb") as fh:
            fh.write(mutated)
        signal.alarm(PER_INPUT_LIMIT_S)
        t0 = time.perf_counter()
        try:
            code = run_snapshot(path)
        except _Timeout:
            code = "timeout"
        except BaseException as exc:  # noqa: BLE001 - the CLI must never raise
            code = f"raised {type(exc).__name__}"
        finally:
            signal.alarm(0)
        elapsed = time.perf_counter() - t0
        codes[code] = codes.get(code, 0) + 1
        kind = what.split(":")[0].split(" in ")[0]
        by_mutation.setdefault(kind, {}).setdefault(code, 0)
        by_mutation[kind][code] += 1
        if code in ("4", "timeout") or code.startswith("raised") or "crash" in code:
            if len(failures) < 10:
                from cli_runner import run
                _c, out, err = run("check", "--replay", path, "--json")
                if "crash" in code:
                    err = "; ".join(sorted(set(_CRASH_RE_LINES(out))))[:400]
                failures.append({"seed": name, "mutation": what, "code": code, "stderr": err[-400:],
                                 "input_b64": base64.b64encode(mutated).decode() if len(mutated) < 400_000 else None})
        if elapsed > slowest["elapsed_s"]:
            slowest = {"elapsed_s": round(elapsed, 4), "seed": name, "mutation": what, "code": code}
        if (n + 1) % 200 == 0:
            print(f"snapshots {n + 1}: {codes}", flush=True)
    os.unlink(path) if os.path.exists(path) else None
    os.rmdir(tmp)
    report["snapshots"] = {"inputs": args.snapshots, "seeds": [n for n, _ in sample_bytes],
                           "exit_codes": codes, "by_mutation": by_mutation, "slowest": slowest,
                           "internal_errors": codes.get("4", 0) + sum(v for k, v in codes.items() if k.startswith("raised")),
                           "probe_crashes": sum(v for k, v in codes.items() if "crash" in k),
                           "first_failures": failures}
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps({k: v for k, v in report["snapshots"].items() if k != "first_failures"}, indent=1))
    for f in failures:
        print("FAIL", f["mutation"], f["code"], f["stderr"][-200:].strip())
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    bad = report["parsers"]["internal_errors"] + report["snapshots"]["internal_errors"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
