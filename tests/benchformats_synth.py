"""Writes one SYNTHESIZED output per format of ccdiag/benchparse/formats.json that has a template,
from the tools' own print format strings (ccdiag/benchparse/printed.json): printf formats are
rendered as C's printf would, C++ stream pieces as written, ``setw`` fields right-aligned.

Why: a reader is tested on every format the tools print, and a real paste of each is not always at
hand (a flag few use, a release few run). Every line of a synthesized file comes from a format
string the tool's source holds; only the values are made up, and the file says so in its first line.

    python tests/benchformats_synth.py OUTDIR     # writes OUTDIR/<format id>.txt
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORMATS = ROOT / "ccdiag" / "benchparse" / "formats.json"
PRINTED = ROOT / "ccdiag" / "benchparse" / "printed.json"
#: tools written in C++ print through streams: their pieces are literal text, not printf formats
STREAM_TOOLS = {"nvbandwidth"}
_SPEC = re.compile(r"%([-+ #0]*)(\*|[0-9]+)?(?:\.(\*|[0-9]+))?(hh|h|ll|l|L|z|j|t)?([diouxXeEfFgGcsp%])")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "\r"}


def c_unescape(text: str) -> str:
    """A C string literal's source text (``\\n``, ``\\t``, ``\\"``) as the program holds it."""
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


def cprintf(fmt: str, args: list) -> str:
    """``fmt`` rendered as C's printf renders it with ``args`` (length modifiers dropped, %u as %d)."""
    out, pos, it = [], 0, iter(args)
    for m in _SPEC.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, _, conv = m.groups()
        if conv == "%":
            out.append("%")
            continue
        if width == "*":
            width = str(next(it))
        if prec == "*":
            prec = str(next(it))
        value = next(it)
        if conv in "diuoxX":
            value, conv = int(value), {"u": "d", "i": "d"}.get(conv, conv)
        elif conv in "eEfFgG":
            value = float(value)
        else:
            value, conv = str(value), "s"
        out.append(("%" + flags + (width or "") + ("." + prec if prec is not None else "") + conv) % value)
    out.append(fmt[pos:])
    return "".join(out)


def _strip_define(key: str) -> str:
    """``#define RESULT_FMT <text>`` -> ``<text>``, ``NVB_RUNNING = Running`` -> ``Running`` (the
    extraction keeps the macro's or constant's name in front)."""
    if key.startswith("#define "):
        return key.split(" ", 2)[2]
    m = re.match(r"NVB_\w+ = (.*)$", key, re.S)
    return m.group(1) if m else key


def render(tool: str, template: list[dict], printed: dict) -> str:
    known = printed["tools"][tool]["strings"]
    parts = []
    for piece in template:
        if "fmt" in piece:
            key = piece["fmt"]
            if key not in known:
                raise KeyError(f"{tool}: {key!r} is not a printed string")
            text = c_unescape(_strip_define(key))
            literal = tool in STREAM_TOOLS or piece.get("raw")  # raw: printed through "%s"
            parts.append(text if literal else cprintf(text, piece.get("args", [])))
        elif "setw" in piece:
            parts.append(str(piece["value"]).rjust(int(piece["setw"])))
        elif "value" in piece:
            parts.append(str(piece["value"]))
        else:
            parts.append(piece["text"])
    return "".join(parts)


def synthesized() -> dict[str, tuple[str, str]]:
    """format id -> (tool, the synthesized output, its first line saying SYNTHESIZED and from what)."""
    fmts = json.loads(FORMATS.read_text(encoding="utf-8"))
    printed = json.loads(PRINTED.read_text(encoding="utf-8"))
    out = {}
    for tool, entry in fmts["tools"].items():
        for f in entry["formats"]:
            if "synth" in f:
                head = (f"#ccdiag-synthesized: SYNTHESIZED {f['id']} from the print formats of {entry['repository']} "
                        "(ccdiag/benchparse/printed.json); the values are made up\n")
                out[f["id"]] = (tool, head + render(tool, f["synth"], printed))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip())
        return 2
    target = pathlib.Path(argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for fid, (_, text) in synthesized().items():
        (target / f"{fid}.txt").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
