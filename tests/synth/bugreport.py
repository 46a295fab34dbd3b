"""SYNTHESIZED nvidia-bug-report logs: the R580 script's layout around section bodies handed in.

Nothing here ran ``nvidia-bug-report.sh``. The frame is the one the 580.126.09 script writes (its
separator of 44 underscores, ``*** <path>`` and ``*** ls:`` lines for files, the echoed command line
and a blank line before a command's output, ``report_command``'s blank line after it, the prologue
with ``nvidia-bug-report.sh Version: 37062940``, the closing line), as read from the script
(``ccdiag/data/bugreport_sections.json``). The bodies are whatever a test passes: real outputs from
the fixtures (each with its own source) or lines a test writes itself. Reports built here say
SYNTHESIZED in their ``command line flags`` line.
"""

from __future__ import annotations

SEPARATOR = "_" * 44
PROLOGUE = """Start of NVIDIA bug report log file.  Please include this file, along
with a detailed description of your problem, when reporting a graphics
driver bug via the NVIDIA Linux forum (see forums.developer.nvidia.com)
or by sending email to 'linux-bugs@nvidia.com'.

nvidia-bug-report.sh Version: 37062940

Date: Tue Mar  3 10:41:07 UTC 2026
uname: Linux {host} 6.8.0-60-generic #63-Ubuntu SMP PREEMPT_DYNAMIC x86_64 x86_64 x86_64 GNU/Linux
command line flags: SYNTHESIZED{flags}

Component                           | Details
================================================================================
NVIDIA SMI                          | NVIDIA-SMI version  : 580.126.09
--------------------------------------------------------------------------------
OS Details                          | 6.8.0-60-generic
--------------------------------------------------------------------------------
"""


def file_section(path: str, body: str) -> str:
    return (f"{SEPARATOR}\n\n*** {path}\n*** ls: -r--r--r-- 1 root root 0 2026-03-03 10:41:07.000000000 +0000 {path}\n"
            f"{body.rstrip()}\n\n")


def missing_file(path: str) -> str:
    return f"{SEPARATOR}\n\n*** {path} does not exist\n\n"


def command_block(*commands: tuple[str, str]) -> str:
    """One separator, then each ``report_command``: the command line, a blank, its output, a blank."""
    out = f"{SEPARATOR}\n\n"
    for line, body in commands:
        out += f"{line}\n\n{body.rstrip()}\n\n"
    return out


def titled(title: str, body: str) -> str:
    return f"{SEPARATOR}\n\n{title}\n\n{body.rstrip()}\n"


def report(*sections: str, host: str = "gpu-node-07", flags: str = "", end: bool = True) -> str:
    text = f"{SEPARATOR}\n\n" + PROLOGUE.format(host=host, flags=(" " + flags) if flags else "")
    text += "".join(sections)
    if end:
        text += f"{SEPARATOR}\n\nEnd of NVIDIA bug report log file.\n"
    return text


def strip_fixture_header(text: str) -> str:
    """A fixture's captured output without its ``#ccdiag-`` source lines."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#ccdiag-")) + "\n"
