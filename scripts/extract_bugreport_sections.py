#!/usr/bin/env python3
"""List every section header an ``nvidia-bug-report.sh`` writes, from the script itself.

Usage::

    python3 scripts/extract_bugreport_sections.py /usr/bin/nvidia-bug-report.sh [more copies...]
    python3 scripts/extract_bugreport_sections.py --check SCRIPT   # headers ccdiag's catalogue misses

The script ships with every NVIDIA driver (``/usr/bin/nvidia-bug-report.sh``, or inside the ``.run``
installer). What it prints before each block of the log is what ccdiag's section reader
(:mod:`ccdiag.nvfiles.sections`) recognises, so this extractor turns a copy of it into the list of
headers, one JSON object per line: the script's change number (``NVIDIA_BUG_REPORT_CHANGE``, which
the log prints as "nvidia-bug-report.sh Version: N"), the kind (``file``, ``command``, ``title``,
``skip``) and the header with the script's variables turned into ``*`` (a path glob) or into the
tool's name (``$nvidia_smi --query`` -> ``nvidia-smi --query``). ``--check`` compares them with
``ccdiag/data/bugreport_sections.json`` and prints the ones no catalogue entry matches.

It reads shell text only; nothing is run. It changes nothing on the machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

#: shell helpers that print a file's contents under "*** <path>"
_FILE_HELPERS = ("append", "append_silent", "append_glob", "append_file_or_dir_silent", "report_file")
_FILE_CALL = re.compile(r"^\s*(?:\[[^\]]*\]\s*&&\s*)?(" + "|".join(_FILE_HELPERS) + r")\s+(\"[^\"]*\"|\S+)")
_BINARY_CALL = re.compile(r"^\s*append_binary_file\s+(\"[^\"]*\"|\S+)")
#: ``report_command "$nvidia_smi --query"`` / ``append_command ...``
_COMMAND_CALL = re.compile(r"^\s*(?:report_command|append_command)\s+\"([^\"]+)\"")
#: ``echo "$lspci -nn"``, ``echo "journalctl -b $boot $match"``, ``echo "dmesg:"``
_ECHO = re.compile(r"^\s*echo\s+\"((?:[^\"\\]|\\.)*)\"\s*$")
#: ``lspci=`which lspci ...``` binds a variable to a tool
_WHICH = re.compile(r"^\s*(\w+)=`(?:PATH=\S+\s+)?which\s+([\w.+-]+)")
#: ``cmd="$systemctl status ..."``
_CMD_VAR = re.compile(r"^\s*cmd=\"([^\"]+)\"")
_REPORT_SKIP = re.compile(r"^\s*report_skip\s+\"([^\"]+)\"")
_REPORT_ERROR = re.compile(r"^\s*report_and_store_error\s+\"([^\"]+)\"")
_CHANGE = re.compile(r"\$Change:\s*(\d+)\s*\$")
_VAR = re.compile(r"\$\{?(\w+)\}?")
#: echo lines that are prose inside a section, not a header (usage text, progress, advice)
_PROSE_START = ("  ", "Please ", "your ", "or by ", "By delivering", "and agree", "the output", "output only",
                "Usage", "Options", "Description", "Troubleshooting", "Examples", "Error: ", "ERROR", "If ",
                "WARNING", "nvidia-bug-report.sh will", "system and create", "directory.", "cases, it may",
                "by the Linux", "the bug report", "may still", "Running $(", "Detected driver type",
                "Exiting current block", "Install RM Driver", "  sudo", "  then", "Standard RM driver",
                "No NVIDIA driver modules", "nvidia-smi does not work", "Skipped in safe mode",
                "No suitable log", "No NVIDIA kernel messages", "Unable to detect", "Found compatible",
                "Found non-libglvnd", "Found incompatible", "Library ", "Internal error", "Found library",
                "Libglvnd ABI", "Client version", "No package", "Can't parse", "-----", "Checking library",
                "failed with error", "Device      :", "Device Name :", "Firmware Ver", "Link Layer  :",
                "Port State  :", "Distribution", "Kernel       :", "Hostname", "Architecture :", "Uptime",
                "Warning: Questionable", "Start of NVIDIA bug report", "with a detailed", "driver bug via",
                "Date:", "uname:", "command line flags", "nvidia-bug-report.sh Version", "End of NVIDIA bug",
                "xset could not", "nvidia-settings could not", "xrandr could not", "/sys/class/drm not present",
                "/dev/dri not present", "Vulkan loader not found", "Vulkan SC loader not found",
                "Listing common ICD paths", "$1 is not readable", "*** $1", "base64 \\\"$1\\\"",
                "Summary of", "Skipping: $description", "Error: $description", "Resolution:", "$details",
                "$description", "$cmd", "\\n")


def _tools(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in map(_WHICH.match, text.splitlines()) if m}


def _unquote(arg: str) -> str:
    return arg[1:-1] if len(arg) >= 2 and arg[0] == arg[-1] == '"' else arg


def _glob(path: str) -> str:
    """A path with its shell variables as ``*``; the Bottlerocket host-root prefix dropped."""
    path = path.replace("${HOST_ROOT}", "").replace("$HOST_ROOT", "")
    path = _VAR.sub("*", path)
    return re.sub(r"/\./", "/", path)


def _command(line: str, tools: dict[str, str]) -> str:
    """``$nvidia_smi --query`` -> ``nvidia-smi --query``; other variables -> ``*``."""
    def name(m: re.Match) -> str:
        return tools.get(m.group(1), "*")
    return re.sub(r"\s+", " ", _VAR.sub(name, line.replace('\\"', '"'))).strip()


def headers(text: str) -> tuple[str | None, list[dict]]:
    """(change number, [{kind, header}]) of one script, in the order the script writes them."""
    change = _CHANGE.search(text)
    tools = _tools(text)
    out: list[dict] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: str, header: str) -> None:
        if kind in ("file", "base64") and all(seg.startswith("*") for seg in header.split("/") if seg):
            return  # a helper's own argument or a path only known when the script runs ("$j/*.conf")
        if (kind, header) not in seen:
            seen.add((kind, header))
            out.append({"kind": kind, "header": header})

    cmd_var = None
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _FILE_CALL.match(line)
        if m and "$1" not in m.group(2):
            add("file", _glob(_unquote(m.group(2))))
            continue
        m = _BINARY_CALL.match(line)
        if m and "$1" not in m.group(1):
            add("base64", _glob(_unquote(m.group(1))))
            continue
        m = _COMMAND_CALL.match(line)
        if m and m.group(1) != "$1":
            add("command", _command(m.group(1), tools))
            continue
        m = _CMD_VAR.match(line)
        if m:
            cmd_var = _command(m.group(1), tools)
            continue
        m = _REPORT_SKIP.match(line)
        if m:
            add("skip", "Skipping: " + _command(m.group(1), tools))
            continue
        m = _REPORT_ERROR.match(line)
        if m:
            add("error", "Error: " + _command(m.group(1), tools))
            continue
        m = _ECHO.match(line)
        if not m:
            continue
        said = m.group(1)
        if said == "$cmd" and cmd_var:
            add("command", cmd_var)
            continue
        if said.startswith("Skipping ") and "output" in said:
            add("skip", _command(said, tools))
            continue
        if said.startswith(_PROSE_START) or not said.strip() or said.startswith("____"):
            continue
        if said.startswith("$") and said[1:2].isalpha():
            add("command", _command(said, tools))
        elif said.endswith(":") or said[:1].isupper():
            add("title", _command(said, tools))
        elif " " in said and said.split()[0] in ("journalctl", "ldd", "timeout", "base64"):
            add("command", _command(said, tools))
    return (change.group(1) if change else None), out


def _catalogue() -> list[dict]:
    from importlib import resources

    return json.loads(resources.files("ccdiag").joinpath("data/bugreport_sections.json").read_text())["sections"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scripts", nargs="+", help="copies of nvidia-bug-report.sh")
    ap.add_argument("--check", action="store_true", help="print the headers no catalogue entry matches")
    args = ap.parse_args(argv)
    missing = 0
    for path in args.scripts:
        with open(path, encoding="utf-8", errors="replace") as fh:
            change, found = headers(fh.read())
        if args.check:
            from ccdiag.nvfiles.sections import catalogue_entry_for

            for h in found:
                if catalogue_entry_for(h["kind"], h["header"]) is None:
                    missing += 1
                    print(json.dumps({"change": change, **h, "catalogued": False}))
            continue
        for h in found:
            print(json.dumps({"change": change, **h}))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
