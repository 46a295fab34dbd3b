#!/usr/bin/env python3
"""Re-extract the message formats NCCL (and the network plugins whose messages fill cloud logs) can
print, from a local git clone of each project, into ``ccdiag/data/nccl_messages.json``.

Why: ``ccdiag nccl --log`` explains every WARN an NCCL release can print. Its catalogue
(``ccdiag/data/nccl_catalogue.json``) maps message formats to families with a meaning and a remedy;
this script is the other half: the list of formats as the sources print them, with the file and line
and the releases each appears in, so a new NCCL release is a re-run plus a review of what the coverage
test names as unmapped. Only the format strings and their places are kept, never the projects' code.

What is read: every ``WARN(...)`` call (NCCL; the Mellanox SHARP plugin), ``NCCL_OFI_WARN(...)`` /
``NCCL_OFI_INFO(...)`` (aws-ofi-nccl) and the TCPX plugin's ``WARN``; and the ``INFO(...)`` calls
whose format carries a failure or fallback fact (words such as "fail", "error", "disabl", "not
available", "fall back"). The C reading handles string concatenation (``"a" "b"``), ``PRIu64``-style
macros, calls spanning lines, comments and escapes; a format built at run time is kept as ``%s``.

Changes nothing but the output file. Usage (each ``--*-git`` is a bare or working git directory)::

    python scripts/extract_nccl_messages.py --nccl-git /path/to/nccl.git \\
        [--since v2.18.1-1] [--pin v2.30.7-1] \\
        [--plugin aws-ofi-nccl=/path/to/aws-ofi-nccl.git@TAG ...] [-o ccdiag/data/nccl_messages.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "ccdiag" / "data" / "nccl_messages.json"
SOURCE_EXT = (".cc", ".cu", ".c", ".h", ".cpp", ".hpp", ".cuh")

#: the <inttypes.h> macros on LP64 Linux (what the logs were printed with)
PRI = {f"PRI{c}{n}": ("l" if n == "64" else "") + c for c in "diouxX" for n in ("8", "16", "32", "64")}
PRI.update({f"PRI{c}PTR": "l" + c for c in "diouxX"})
PRI.update({f"SCN{c}64": "l" + c for c in "diouxX"})

#: an INFO format is kept when it says that something failed, fell back or was turned off
INFO_FAILURE = re.compile(
    r"fail|error|unable|cannot|can't|could not|couldn't|not (?:available|supported|found|enabled|loaded|present|"
    r"compatible|initiali[sz]ed|usable)|unsupported|disabl|fall(?:ing)? ?back|timeout|timed out|abort|mismatch|"
    r"no (?:device|usable|interface|nic|gpu|support)|invalid|missing|insufficient|exceed|too (?:many|small|large)|"
    r"out of|ignor|retry|giving up|crash|dead|hang|not possible|forc(?:ed|ing) .*off|skip", re.IGNORECASE)

#: call name -> index of the format among its arguments, per project
CALLS = {
    "nccl": {"WARN": 0, "INFO": 1},
    "aws-ofi-nccl": {"NCCL_OFI_WARN": 0, "NCCL_OFI_INFO": 1, "NCCL_OFI_WARN_ONCE": 0},
    "nccl-plugin-gpudirecttcpx": {"WARN": 0, "INFO": 1},
    "nccl-rdma-sharp-plugins": {"WARN": 0, "INFO": 1},
}
LEVEL = {"WARN": "WARN", "INFO": "INFO", "NCCL_OFI_WARN": "WARN", "NCCL_OFI_WARN_ONCE": "WARN",
         "NCCL_OFI_INFO": "INFO"}
#: text a project's logging macro puts before every format (aws-ofi-nccl's ``"NET/OFI " fmt``)
PREFIX = {"aws-ofi-nccl": "NET/OFI "}


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(["git", "-C", gitdir, *args], check=True, capture_output=True, text=True,
                          errors="replace").stdout


def tags_between(gitdir: str, since: str, pin: str) -> list[str]:
    """The release tags from ``since`` to ``pin`` (version order; release candidates and other tags left out)."""
    rel = re.compile(r"v(\d+)\.(\d+)\.(\d+)-(\d+)$")

    def key(t: str) -> tuple[int, ...]:
        m = rel.match(t)
        assert m
        return tuple(int(x) for x in m.groups())

    tags = sorted((t for t in git(gitdir, "tag").split() if rel.match(t)), key=key)
    lo, hi = key(since), key(pin)
    return [t for t in tags if lo <= key(t) <= hi]


# -- C reading ---------------------------------------------------------------------------------------
def blank_comments(text: str) -> tuple[str, str]:
    """(text without comments, the same with string and char literal contents blanked): both keep
    every offset and newline, so a match in the second is parsed in the first."""
    out, code = [], []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            code.append(" " * (j - i))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank = re.sub(r"[^\n]", " ", text[i:j])
            out.append(blank)
            code.append(blank)
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(text[i:j])
            code.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            code.append(c)
            i += 1
    return "".join(out), "".join(code)


def call_args(text: str, code: str, open_paren: int) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose ``(`` is at ``open_paren``, and the offset after ``)``."""
    depth, start, args = 0, open_paren + 1, []
    for i in range(open_paren, min(len(code), open_paren + 20000)):
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i])
                return args, i + 1
        elif c == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
    return None


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "\"": "\"", "'": "'", "a": "\a", "?": "?"}
_TOKEN = re.compile(r'\s*(?:(?:u8|[uUL])?"((?:[^"\\\n]|\\.)*)"|([A-Za-z_]\w*))')


def unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "x":
                m = re.match(r"[0-9a-fA-F]{1,2}", s[i + 2:])
                out.append(chr(int(m.group(0), 16)) if m else "x")
                i += 2 + (len(m.group(0)) if m else 0)
                continue
            if nxt in "01234567":
                m = re.match(r"[0-7]{1,3}", s[i + 1:])
                assert m
                out.append(chr(int(m.group(0), 8)))
                i += 1 + len(m.group(0))
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def format_of(arg: str, defines: dict[str, str]) -> str | None:
    """The format an argument expression prints: literals concatenated, PRI macros and string macros
    expanded, any other identifier (a format chosen at run time) as ``%s``. None when it is no format."""
    parts, pos, saw_literal = [], 0, False
    arg = arg.strip()
    while pos < len(arg):
        m = _TOKEN.match(arg, pos)
        if not m or m.end() == pos:
            return "".join(parts) if saw_literal and not arg[pos:].strip() else None
        if m.group(1) is not None:
            parts.append(unescape(m.group(1)))
            saw_literal = True
        else:
            name = m.group(2)
            parts.append(PRI.get(name) or defines.get(name) or "%s")
        pos = m.end()
    return "".join(parts) if saw_literal else None


_DEFINE = re.compile(r'^[ \t]*#[ \t]*define[ \t]+([A-Z_][A-Z0-9_]*)[ \t]+"((?:[^"\\\n]|\\.)*)"[ \t]*$', re.M)


def messages_in(text: str, calls: dict[str, int], prefix: str = "") -> Iterator[tuple[str, int, str]]:
    """(level, line, format) of every message call in one source file."""
    text, code = blank_comments(text)
    defines = {m.group(1): unescape(m.group(2)) for m in _DEFINE.finditer(text)}
    names = "|".join(sorted(calls, key=len, reverse=True))
    for m in re.finditer(rf"(?<![\w.>])({names})\s*\(", code):
        line_start = code.rfind("\n", 0, m.start()) + 1
        if re.match(r"\s*#\s*define\b", code[line_start:m.start()]):
            continue  # the macro's own definition (or a wrapper's)
        got = call_args(text, code, m.end() - 1)
        if got is None:
            continue
        args, _ = got
        index = calls[m.group(1)]
        if len(args) <= index:
            continue
        fmt = format_of(args[index], defines)
        if fmt is None:
            continue
        fmt = (prefix + fmt).strip("\n").rstrip()
        level = LEVEL[m.group(1)]
        if not fmt or (level == "INFO" and not (INFO_FAILURE.search(fmt) or fmt == "%s:%d -> %d")):
            continue
        yield level, text.count("\n", 0, m.start()) + 1, fmt


# -- over releases -----------------------------------------------------------------------------------
def blobs(gitdir: str, tag: str, roots: tuple[str, ...]) -> dict[str, str]:
    """path -> blob id of the source files under ``roots`` at ``tag``."""
    out = {}
    for line in git(gitdir, "ls-tree", "-r", tag, "--", *roots).splitlines():
        meta, path = line.split("\t", 1)
        kind, sha = meta.split()[1:3]
        if kind == "blob" and path.endswith(SOURCE_EXT) and "/test" not in path and not path.startswith("test"):
            out[path] = sha
    return out


def read_blobs(gitdir: str, shas: list[str]) -> dict[str, str]:
    if not shas:
        return {}
    proc = subprocess.run(["git", "-C", gitdir, "cat-file", "--batch"], input=("\n".join(shas) + "\n").encode(),
                          capture_output=True, check=True)
    data, out, pos = proc.stdout, {}, 0
    for sha in shas:
        nl = data.index(b"\n", pos)
        size = int(data[pos:nl].split()[2])
        out[sha] = data[nl + 1:nl + 1 + size].decode("utf-8", "replace")
        pos = nl + 1 + size + 1
    return out


def extract(source: str, gitdir: str, tags: list[str], roots: tuple[str, ...], strip: str = "") -> dict:
    """Every message of ``source`` over ``tags``: formats with where they are and which tags print them."""
    calls = CALLS[source]
    parsed: dict[str, list[tuple[str, int, str]]] = {}
    per_tag: dict[tuple[str, str], dict[str, tuple[str, int]]] = {}
    for tag in tags:
        files = blobs(gitdir, tag, roots)
        todo = [s for s in set(files.values()) if s not in parsed]
        for sha, text in read_blobs(gitdir, todo).items():
            parsed[sha] = list(messages_in(text, calls, PREFIX.get(source, "")))
        for path, sha in sorted(files.items()):
            shown = path[len(strip):] if strip and path.startswith(strip) else path
            for level, line, fmt in parsed[sha]:
                per_tag.setdefault((level, fmt), {}).setdefault(tag, (shown, line))
    entries = []
    for (level, fmt), where in per_tag.items():
        present = [t for t in tags if t in where]
        last = present[-1]
        entry = {"source": source, "level": level, "format": fmt, "file": where[last][0], "line": where[last][1],
                 "versions": ranges(present, tags)}
        moved: dict[str, list[str]] = {}  # earlier files that printed it (moved between files across releases)
        for t in present:
            if where[t][0] != where[last][0]:
                moved.setdefault(where[t][0], []).append(t)
        if moved:
            entry["also"] = [f"{f}:{where[ts[-1]][1]} ({', '.join(ranges(ts, tags))})" for f, ts in moved.items()]
        entries.append(entry)
    entries.sort(key=lambda e: (e["level"], e["file"], e["line"], e["format"]))
    return {"tags": [t for t in tags], "entries": entries}


def short(tag: str) -> str:
    m = re.match(r"v?(\d+\.\d+(?:\.\d+)?)", tag)
    return m.group(1) if m else tag


def ranges(present: list[str], tags: list[str]) -> list[str]:
    """Runs of consecutive tags as "first..last" (or one version)."""
    out, run = [], []
    for t in tags:
        if t in present:
            run.append(t)
        elif run:
            out.append(run)
            run = []
    if run:
        out.append(run)
    return [short(r[0]) if len(r) == 1 else f"{short(r[0])}..{short(r[-1])}" for r in out]


# -- the command -------------------------------------------------------------------------------------
REPOSITORIES = {"aws-ofi-nccl": "aws/aws-ofi-nccl", "nccl-plugin-gpudirecttcpx": "google/nccl-plugin-gpudirecttcpx",
                "nccl-rdma-sharp-plugins": "Mellanox/nccl-rdma-sharp-plugins"}
PLUGIN_ROOTS = {
    "aws-ofi-nccl": (("src", "include"), ""),
    "nccl-plugin-gpudirecttcpx": (("src",), ""),
    "nccl-rdma-sharp-plugins": (("src", "include"), ""),
}


def write(path: pathlib.Path, doc: dict) -> None:
    """The document with one entry per line, so a re-extraction shows as a readable diff."""
    head = {k: v for k, v in doc.items() if k != "entries"}
    text = json.dumps(head, indent=1, sort_keys=True, ensure_ascii=False)[:-2]
    lines = [json.dumps(e, sort_keys=True, ensure_ascii=False) for e in doc["entries"]]
    path.write_text(text + ',\n "entries": [\n' + ",\n".join(lines) + "\n ]\n}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nccl-git", required=True, help="a git directory of github.com/NVIDIA/nccl")
    ap.add_argument("--since", default="v2.18.1-1")
    ap.add_argument("--pin", default="v2.30.7-1", help="the newest release read (the coverage test's release)")
    ap.add_argument("--plugin", action="append", default=[], metavar="NAME=GITDIR@REF[,REF...]",
                    help=f"a plugin's git directory and the releases read, oldest first; NAME one of "
                         f"{', '.join(PLUGIN_ROOTS)}")
    ap.add_argument("-o", "--output", default=str(OUT))
    args = ap.parse_args(argv)
    tags = tags_between(args.nccl_git, args.since, args.pin)
    if not tags or tags[-1] != args.pin:
        print(f"extract_nccl_messages: {args.pin} not found in {args.nccl_git}", file=sys.stderr)
        return 2
    nccl = extract("nccl", args.nccl_git, tags, ("src",))
    doc = {"about": "message formats extracted by scripts/extract_nccl_messages.py; format, file:line at the newest "
                    "release that prints it, and the releases (first..last) that print it",
           "sources": {"nccl": {"repository": "https://github.com/NVIDIA/nccl", "pinned": args.pin,
                                "commit": git(args.nccl_git, "rev-list", "-n1", args.pin).strip(),
                                "releases": [short(t) for t in tags]}},
           "entries": nccl["entries"]}
    for spec in args.plugin:
        name, rest = spec.split("=", 1)
        gitdir, refs = rest.rsplit("@", 1)
        tags_p = refs.split(",")
        roots, strip = PLUGIN_ROOTS[name]
        present = [r for r in roots if git(gitdir, "ls-tree", tags_p[-1], "--", r).strip()] or ["."]
        got = extract(name, gitdir, tags_p, tuple(present), strip)
        doc["sources"][name] = {"repository": f"https://github.com/{REPOSITORIES[name]}", "pinned": tags_p[-1],
                                "commit": git(gitdir, "rev-list", "-n1", tags_p[-1]).strip(),
                                "releases": [short(t) for t in tags_p]}
        doc["entries"] += got["entries"]
    write(pathlib.Path(args.output), doc)
    counts: dict[tuple[str, str], int] = {}
    for e in doc["entries"]:
        counts[(e["source"], e["level"])] = counts.get((e["source"], e["level"]), 0) + 1
    for (src, level), n in sorted(counts.items()):
        print(f"{src} {level}: {n} formats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
