#!/usr/bin/env python3
"""Re-extract what the benchmark tools print, from their own source, into
ccdiag/benchparse/printed.json: the print format strings of perftest, nvbandwidth, nccl-tests and the
CUDA samples bandwidthTest / p2pBandwidthLatencyTest, for every release tag, grouped into runs of
tags that print the same strings.

Why: ccdiag's readers of these outputs (ccdiag/benchparse/) and their list of formats
(ccdiag/benchparse/formats.json) are derived from the tools' print code, not from samples; this file
is the data they are checked against (tests/test_benchparse_formats.py), and this script is how it is
brought up to date when a tool releases.

Usage (each argument a git clone of the tool; nothing is built, nothing is written outside --out):

    python3 scripts/extract_bench_formats.py --perftest DIR --nvbandwidth DIR --nccl-tests DIR \\
        --cuda-samples DIR [--out ccdiag/benchparse/printed.json] [--check]

--check compares the extraction with the file instead of writing it (exit 1 when they differ).

Only string literals of print calls are kept (format strings and message texts, as data); no code.
The extraction reads ``git show TAG:PATH``; refs beyond the tags are named in EXTRA_REFS (a pull
request that adds a column, which some vendors ship before it is merged).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

#: macros that sit between string literals in format strings, and what printf sees
_MACROS = {"PRIu64": "lu", "PRId64": "ld", "PRIx64": "lx", "RESULT_EXT": "\\n", "REPORT_EXT": "\\n"}
_CALL = re.compile(r"\b(printf|PRINT|fprintf|dprintf|snprintf|OUTPUT|VERBOSE|std::cout|sstream|o)\s*(\(|<<)")
_DEFINE = re.compile(r"^#define\s+((?:RESULT|REPORT)_[A-Z0-9_]+|[A-Z_]*ADDR_FMT|GID_FMT)\s+(.*?)$", re.M)
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_DESC_CALL = re.compile(r"\b(addTestcaseResults|printMatrix|printIndividualMatrix)\s*\(")
_CONST = re.compile(r'\bconst\s+std::string\s+(NVB_\w+)\s*\(\s*"((?:[^"\\\n]|\\.)*)"\s*\)')
_ARRAY = re.compile(r"(?:const\s+)?(?:static\s+)?(?:const\s+)?char\s*\*\s*(\w+)\s*\[\]\s*=\s*\{([^}]*)\}", re.S)

#: tool -> (files read at each ref, the functions of each file to read (None: the whole file),
#: string arrays whose values are printed)
TOOLS = {
    "perftest": {
        "files": {
            "src/perftest_parameters.h": None,
            "src/perftest_parameters.c": ("ctx_print_test_info", "print_report_bw", "print_full_bw_report",
                                          "print_report_lat", "print_report_lat_duration", "print_report_fs_rate",
                                          "write_test_info_to_file", "write_bw_report_to_file"),
            "src/cuda_memory.c": ("init_gpu", "cuda_memory_init", "cuda_memory_allocate_buffer", "cuda_memory_create"),
            "src/perftest_resources.c": ("pp_init_gpu", "pp_init_gpu_buf"),
            "src/write_bw.c": None,
            "src/write_lat.c": None,
            "src/perftest_communication.h": None,
            "src/perftest_communication.c": ("ctx_print_pingpong_data",),
        },
        "arrays": ("testsStr", "connStr", "qp_state", "exchange_state", "sideArray"),
        #: literals of any print call in the whole file that match: warnings printed while parsing options
        "grep": {"src/perftest_parameters.c": r"^ ?WARNING"},
    },
    "nvbandwidth": {
        "files": {"nvbandwidth.cpp": None, "output.cpp": None, "common.h": None, "inline_common.h": None,
                  "testcases_ce.cpp": None, "testcases_sm.cpp": None, "multinode_testcases.cpp": None,
                  "testcase.cpp": None, "output.h": None, "json_output.cpp": None},
        "arrays": (),
    },
    "nccl-tests": {
        "files": {f"src/{name}": None for name in ("common.cu", "util.cu", "common.h", "all_reduce.cu", "all_gather.cu",
                                                   "broadcast.cu", "reduce.cu", "reduce_scatter.cu", "alltoall.cu",
                                                   "alltoallv.cu", "gather.cu", "scatter.cu", "sendrecv.cu",
                                                   "hypercube.cu")},
        "arrays": (),
    },
    "bandwidthTest": {
        "files": {"Samples/1_Utilities/bandwidthTest/bandwidthTest.cu": None,
                  "Samples/bandwidthTest/bandwidthTest.cu": None},
        "arrays": ("sMemoryCopyKind", "sMemoryMode"),
        "skip_functions": ("printHelp",),
    },
    "p2pBandwidthLatencyTest": {
        "files": {"Samples/5_Domain_Specific/p2pBandwidthLatencyTest/p2pBandwidthLatencyTest.cu": None,
                  "Samples/p2pBandwidthLatencyTest/p2pBandwidthLatencyTest.cu": None},
        "arrays": (),
        "skip_functions": ("printHelp",),
    },
}
#: which clone each tool is read from
REPO_OF = {"perftest": "perftest", "nvbandwidth": "nvbandwidth", "nccl-tests": "nccl-tests",
           "bandwidthTest": "cuda-samples", "p2pBandwidthLatencyTest": "cuda-samples"}
#: refs read besides the release tags: (tool, ref, the name it is listed under, whether it comes before the
#: first tag); the perftest history before its first tag still ships in distributions' older packages
EXTRA_REFS = (("perftest", "1ccb3fd^", "2016-08-before-1ccb3fd", True),
              ("perftest", "refs/pull/214/head", "pr214-report-min-bw", False))
#: tags that are not releases
SKIP_TAGS = {"delete"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          errors="replace").stdout


def show(repo: Path, ref: str, path: str) -> str | None:
    r = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{path}"], capture_output=True, text=True,
                       errors="replace")
    return r.stdout if r.returncode == 0 else None


def tags(repo: Path) -> list[str]:
    """Release tags in the order of the commits they name (a tag's own date can be later than a newer
    release's: nvbandwidth's v0.4 was tagged before v0.1)."""
    names = [t for t in git(repo, "for-each-ref", "--format=%(refname:short)", "refs/tags").split() if t not in SKIP_TAGS]
    dated = []
    for name in names:
        r = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%ct", f"{name}^{{commit}}"],
                           capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            dated.append((int(r.stdout.strip()), name))
    return [name for _, name in sorted(dated)]


def strip_comments(src: str) -> str:
    """C/C++ comments removed, string literals kept (a '//' inside a literal is not a comment)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_bodies(src: str, names: tuple[str, ...]) -> str:
    """The text of the named functions (their definitions, to the matching brace)."""
    parts = []
    for name in names:
        for m in re.finditer(r"\b" + re.escape(name) + r"\s*\([^;{]*\)\s*\{", src):
            depth, i = 0, m.end() - 1
            while i < len(src):
                if src[i] == "{":
                    depth += 1
                elif src[i] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif src[i] == '"':
                    i += 1
                    while i < len(src) and src[i] != '"':
                        i += 2 if src[i] == "\\" else 1
                i += 1
            parts.append(src[m.start():i + 1])
    return "\n".join(parts)


def drop_functions(src: str, names: tuple[str, ...]) -> str:
    for body in function_bodies(src, names).split("\n}\n"):
        if body.strip():
            src = src.replace(body, "")
    return src


def statement(src: str, start: int) -> str:
    """From ``start`` to the end of the statement (the ';' outside parentheses and literals)."""
    depth, i, n = 0, start, len(src)
    while i < n:
        c = src[i]
        if c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return src[start:i]
        elif c == ";" and depth <= 0:
            return src[start:i]
        i += 1
    return src[start:]


def joined_literals(text: str) -> list[str]:
    """Runs of adjacent string literals (with the macros printf sees between them) joined: each run is
    one string the program prints or formats."""
    runs: list[str] = []
    cur: list[str] | None = None
    pos = 0
    for m in _LITERAL.finditer(text):
        between = text[pos:m.start()].strip()
        pos = m.end()
        if cur is not None and (between == "" or between in _MACROS):
            if between:
                cur.append(_MACROS[between])
            cur.append(m.group(1))
            continue
        if cur is not None:
            runs.append("".join(cur))
        cur = [m.group(1)]
    if cur is not None:
        runs.append("".join(cur))
    return runs


def extract(src: str, spec_funcs: tuple[str, ...] | None, arrays: tuple[str, ...],
            skip: tuple[str, ...] = (), grep: str | None = None) -> set[str]:
    src = strip_comments(src)
    out: set[str] = set()
    if grep:
        for m in _CALL.finditer(src):
            out |= {lit for lit in joined_literals(statement(src, m.start())) if re.search(grep, lit)}
    for name, value in _DEFINE.findall(re.sub(r"\\\n", "", src)):  # continued lines joined
        value = value.rstrip("\\").strip()
        lits = joined_literals(value)
        if lits:
            out.add(f"#define {name} " + "".join(lits))
    for m in _ARRAY.finditer(src):
        if m.group(1) in arrays:
            out.add(f"{m.group(1)}[] = " + " | ".join(joined_literals(m.group(2))))
    for name, value in _CONST.findall(src):
        out.add(f"{name} = {value}")
    body = function_bodies(src, spec_funcs) if spec_funcs else src
    if skip:
        body = drop_functions(body, skip)
    for m in _CALL.finditer(body):
        stmt = statement(body, m.start())
        for lit in joined_literals(stmt):
            if lit.strip():
                out.add(lit)
    for m in _DESC_CALL.finditer(body):
        for lit in joined_literals(statement(body, m.start())):
            out.add(lit)
    return out


def extract_tool(tool: str, repo: Path) -> dict:
    spec = TOOLS[tool]
    refs = ([(ref, name) for tl, ref, name, before in EXTRA_REFS if tl == tool and before] + [(t, t) for t in tags(repo)]
            + [(ref, name) for tl, ref, name, before in EXTRA_REFS if tl == tool and not before])
    apart = {name for tl, _, name, before in EXTRA_REFS if tl == tool and not before}
    per_ref: list[tuple[str, tuple[str, ...]]] = []
    for ref, name in refs:
        strings: set[str] = set()
        found = False
        for path, funcs in spec["files"].items():
            src = show(repo, ref, path)
            if src is None:
                continue
            found = True
            strings |= extract(src, funcs, spec["arrays"], spec.get("skip_functions", ()),
                               spec.get("grep", {}).get(path))
        if found:
            per_ref.append((name, tuple(sorted(strings))))
    order = [name for name, _ in per_ref]
    spans: dict[str, list[list[str]]] = {}
    for k, (name, strings) in enumerate(per_ref):
        for text in strings:
            runs = spans.setdefault(text, [])
            if runs and runs[-1][1] == order[k - 1] and name not in apart:
                runs[-1][1] = name
            else:
                runs.append([name, name])
    return {"refs": order, "strings": dict(sorted(spans.items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("perftest", "nvbandwidth", "nccl-tests", "cuda-samples"):
        ap.add_argument(f"--{name}", type=Path, required=True, metavar="DIR", help=f"a git clone of {name}")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "ccdiag" / "benchparse"
                    / "printed.json")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    a = ap.parse_args()
    clones = {"perftest": a.perftest, "nvbandwidth": a.nvbandwidth, "nccl-tests": a.nccl_tests,
              "cuda-samples": a.cuda_samples}
    doc = {"about": ("String literals of the benchmark tools' print calls: per tool the refs read (release tags in "
                     "order) and each string with the runs of refs [first, last] that print it; written by scripts/extract_bench_formats.py from the tools' public "
                     "repositories (linux-rdma/perftest, NVIDIA/nvbandwidth, NVIDIA/nccl-tests, NVIDIA/cuda-samples)."),
           "heads": {}, "tools": {}}
    for tool in TOOLS:
        repo = clones[REPO_OF[tool]]
        doc["heads"][REPO_OF[tool]] = git(repo, "rev-parse", "HEAD").strip()
        doc["tools"][tool] = extract_tool(tool, repo)
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    if a.check:
        same = a.out.exists() and a.out.read_text(encoding="utf-8") == text
        print("printed.json is up to date" if same else "printed.json differs from a fresh extraction")
        return 0 if same else 1
    a.out.write_text(text, encoding="utf-8")
    for tool, found in doc["tools"].items():
        print(f"{tool}: {len(found['refs'])} refs, {len(found['strings'])} distinct strings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
