"""``dcgmi diag`` results, text and ``-j`` JSON, from DCGM 2.x to 4.x, read into one shape.

Formats, from NVIDIA/DCGM ``dcgmi/Diag.cpp`` and ``nvvs/include/NvvsJsonStrings.h``:

* text: a table of 78-character rows ``| <name, 25> | <info, 46> |`` under category rules
  (``|-----  Deployment  ---``, ``+-----  Hardware  ---``, ``Integration``, ``Stress``) and a
  ``Metadata`` block (DCGM version, driver, device ids). DCGM 2.x/3.x print one row per test with
  ``Pass - All``, ``Fail - GPU: 0`` or ``Pass - GPUs: 1, 2`` and ``Warning`` / ``Info`` / ``Error``
  rows carrying the message cut into 45-character pieces; DCGM 4.x prints the test's overall
  ``Pass``/``Fail``/``Warn``/``Skip`` and one ``GPU0: Fail`` row per entity, its messages under
  ``Warning: GPU0``. Test names are the old display names (``GPU Memory``, ``Targeted Stress``) or,
  from 4.x, the plugin names (``memory``, ``targeted_stress``); both are in
  ``ccdiag/data/dcgm_errors.json``'s test list.
* JSON: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"gpu_ids"|"gpu_id", "status", "warnings", "info"}]}]}]}}`` up to 3.x; 4.x renames the root
  ``"DCGM Diagnostic"``, gives results per entity (``entity_group``, ``entity_id``) with warnings
  as ``{"warning", "error_id", "error_category", "error_severity"}`` and adds ``test_summary``,
  ``entity_groups`` and ``metadata``. Several iterations (``--iterations``) nest the same under
  ``"iterations"``.

A text warning carries no error code: the code is found by matching the message against DCGM's
own message formats (every wording from DCGM 2.4 to 4.6, ``ccdiag/data/dcgm_errors.json``).
Pasted fragments (a few rows, a cut last line) read as far as they go. One pass, linear.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from ccdiag.core.errors import UserInputError

#: the width of the message pieces dcgmi prints per row (DATA_INFO_TAG_LEN)
PIECE = 45
_ROW = re.compile(r"^\|\s?(?P<name>[^|]*?)\s*\|\s?(?P<info>.*?)\s*(?:\|\s*)?$")
_CATEGORY = re.compile(r"^[|+]-{5}\s+(?P<cat>[A-Za-z]+)\s+-+[+|]")
_STATUS_OLD = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)(?:\s*-\s*(?P<who>All|GPUs?:?\s*(?P<ids>[\d,\s]+)))?\s*$",
                         re.IGNORECASE)
_STATUS_NEW = re.compile(r"^(?P<entity>GPU|CPU|NvSwitch|Switch|Link)\s?(?P<id>\d+):\s*(?P<status>Pass|Fail|Warn|Skip|Not Run)\s*$",
                         re.IGNORECASE)
_MESSAGE_NAME = re.compile(r"^(?P<kind>Warning|Info|Error)(?::\s*(?P<entity>[A-Za-z]+)\s?(?P<id>\d+))?$")
_GPU_IN_TEXT = re.compile(r"\bGPU\s?(\d{1,4})\b")
_META = {"DCGM Version": "dcgm_version", "Driver Version Detected": "driver_version",
         "GPU Device IDs Detected": "device_ids", "GPU Device IDs": "device_ids"}
MAX_TESTS = 4096


class DcgmDiagError(UserInputError):
    """A ``dcgmi diag`` output that cannot be read (exit 2), naming what was wrong."""


@dataclass
class DiagMessage:
    kind: str  # warning | info | error
    text: str
    gpu: int | None = None
    error_id: int | None = None  # DCGM_FR_* code (JSON), or found by matching the message (text)
    error_id_from: str | None = None  # "json" | "message format"


@dataclass
class DiagTest:
    name: str  # as printed
    category: str | None = None
    status: str | None = None  # the test's overall status: pass | fail | warn | skip | not_run
    results: dict[int, str] = field(default_factory=dict)  # GPU -> status
    messages: list[DiagMessage] = field(default_factory=list)
    plugin: str | None = None  # the DCGM plugin / software sub-test name

    @property
    def worst(self) -> str | None:
        order = ("fail", "warn", "skip", "not_run", "pass")
        seen = [s for s in (self.status, *self.results.values()) if s]
        return min(seen, key=lambda s: order.index(s) if s in order else 99) if seen else None


@dataclass
class DiagRun:
    form: str  # "text" | "json"
    dcgm_version: str | None = None
    driver_version: str | None = None
    tests: list[DiagTest] = field(default_factory=list)
    runtime_error: str | None = None
    overall: str | None = None  # "Overall Result" of an iterated run
    device_ids: str | None = None

    def gpus(self) -> list[int]:
        seen = {g for t in self.tests for g in t.results} | {m.gpu for t in self.tests for m in t.messages
                                                             if m.gpu is not None}
        return sorted(seen)


@lru_cache(maxsize=1)
def catalogue() -> dict:
    return json.loads(resources.files("ccdiag").joinpath("data/dcgm_errors.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def errors_by_code() -> dict[int, dict]:
    return {e["code"]: e for e in catalogue()["errors"]}


def _format_regex(fmt: str) -> re.Pattern | None:
    """A DCGM printf message format as a pattern; None for one too generic to identify a message."""
    literal = re.sub(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z)?[diuxXfsc]", "", fmt)
    if len(literal.strip()) < 12:
        return None
    parts = re.split(r"(%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z)?[diuxXfsc])", fmt)
    out = []
    for part in parts:
        if not part.startswith("%") or len(part) < 2:
            out.append(re.escape(part).replace(r"\ ", r"\s+"))
        elif part[-1] in "diu":
            out.append(r"-?\d+")
        elif part[-1] in "xX":
            out.append(r"[0-9a-fA-F]+")
        elif part[-1] == "f":
            out.append(r"-?[\d.]+")
        else:
            out.append(r".{0,200}?")
    return re.compile("".join(out), re.IGNORECASE)


@lru_cache(maxsize=1)
def _formats() -> tuple[tuple[int, re.Pattern], ...]:
    out = []
    for e in catalogue()["errors"]:
        for fmt in [e.get("message")] + list(e.get("message_variants") or []):
            rx = _format_regex(fmt) if fmt else None
            if rx is not None:
                out.append((e["code"], rx))
    # longer (more specific) formats first
    return tuple(sorted(out, key=lambda t: -len(t[1].pattern)))


def code_of_message(text: str) -> int | None:
    """The DCGM_FR_* code whose message format ``text`` carries, or None."""
    for code, rx in _formats():
        if rx.search(text):
            return code
    return None


@lru_cache(maxsize=1)
def _tests() -> dict[str, dict]:
    out = {}
    for t in catalogue()["tests"]:
        out[t["name"].lower()] = t
        if t.get("display"):
            out.setdefault(t["display"].lower(), t)
    return out


def test_info(name: str) -> dict | None:
    """The catalogue's entry for a test printed as ``name`` (plugin or display name)."""
    return _tests().get(name.strip().lower())


def _status(word: str) -> str:
    low = word.strip().lower().replace(" ", "_")
    return {"passed": "pass", "failed": "fail", "skipped": "skip", "warning": "warn"}.get(low, low)


def _message(kind: str, text: str, gpu: int | None, error_id: int | None = None) -> DiagMessage:
    if gpu is None:
        m = _GPU_IN_TEXT.search(text)
        gpu = int(m.group(1)) if m else None
    source = "json" if error_id is not None else None
    if error_id is None:
        error_id = code_of_message(text)
        source = "message format" if error_id is not None else None
    return DiagMessage(kind, text, gpu, error_id, source)


# -- text --------------------------------------------------------------------------------------------
def _cells(line: str) -> tuple[str, str, str] | None:
    """(name, info stripped, info as printed) of a table row."""
    raw = line.rstrip("\n\r")
    if len(raw) >= 30 and raw[0] == "|" and raw[28] == "|":
        name = raw[2:27].strip()
        info_raw = raw[30:76] if len(raw) >= 77 else raw[30:]
        return name, info_raw.strip().rstrip("|").strip(), info_raw
    m = _ROW.match(raw.strip())
    if m is None:
        return None
    return m.group("name").strip(), m.group("info").strip(), m.group("info") + " "


class _TextReader:
    """One pass over a ``dcgmi diag`` table: the category and test being read, and the message whose
    45-character pieces are being gathered until a row that is not one of them ends it."""

    def __init__(self) -> None:
        self.run = DiagRun("text")
        self.category: str | None = None
        self.test: DiagTest | None = None
        self.pending: list[str] | None = None  # pieces of the message being read
        self.pending_head: tuple[str, int | None] | None = None  # its kind and GPU
        self.in_meta = False

    def flush(self) -> None:
        """Ends the message being read: its pieces joined become one message of the current test."""
        if self.pending is not None and self.pending_head is not None and self.test is not None:
            joined = "".join(p[:PIECE] for p in self.pending).strip()
            if joined:
                self.test.messages.append(_message(self.pending_head[0], joined, self.pending_head[1]))
        self.pending, self.pending_head = None, None

    def line(self, line: str) -> bool:
        """Reads one line; False once the run holds :data:`MAX_TESTS` tests and a new one begins."""
        stripped = line.strip()
        if not stripped or stripped.startswith("#ccdiag-") or self._rule(stripped):
            return True
        cells = _cells(line)
        if cells is None:
            self._loose_line(stripped)
            return True
        return self._row(*cells)

    def _rule(self, stripped: str) -> bool:
        """A category rule (which starts a category, or the metadata block) or a plain rule: True."""
        cat = _CATEGORY.match(stripped)
        if cat:
            self.flush()
            self.in_meta = cat.group("cat") == "Metadata"
            self.category = None if self.in_meta else cat.group("cat")
            return True
        if stripped.startswith("+") and set(stripped) <= set("+-=|"):
            self.flush()
            return True
        return False

    def _loose_line(self, stripped: str) -> None:
        """A line outside the table: only a runtime error printed there is kept (the first one)."""
        if "runtime error" in stripped.lower() or stripped.lower().startswith("error:"):
            self.run.runtime_error = self.run.runtime_error or stripped

    def _row(self, name: str, info: str, info_raw: str) -> bool:
        if name == "Diagnostic" and info == "Result":
            return True
        if self.in_meta or name in _META:
            if name in _META:
                setattr(self.run, _META[name], info or None)
            return True
        msg = _MESSAGE_NAME.match(name)
        if msg:
            self._message_head(msg, info_raw)
        elif not name:
            self._unnamed_row(info, info_raw)
        else:
            return self._test_row(name, info)
        return True

    def _message_head(self, msg: re.Match, info_raw: str) -> None:
        """A ``Warning`` / ``Info`` / ``Error`` row: the first piece of a message of the current test."""
        self.flush()
        gpu = int(msg.group("id")) if msg.group("id") and (msg.group("entity") or "").upper() == "GPU" else None
        self.pending, self.pending_head = [info_raw], (msg.group("kind").lower(), gpu)
        if self.test is None:  # a deployment-level message before any test row (DCGM 2.x "Error")
            category = self.category or "Deployment"
            self.test = DiagTest(f"{category} (no test named)", self.category,
                                 plugin="software" if category == "Deployment" else None)
            self.run.tests.append(self.test)

    def _unnamed_row(self, info: str, info_raw: str) -> None:
        """A row with no name: the next piece of the message being read, else one more result row
        (a GPU's status) of the current test."""
        if self.pending is not None and not _STATUS_NEW.match(info) and not _STATUS_OLD.match(info):
            self.pending.append(info_raw)
            return
        self.flush()
        if self.test is not None:
            _result_row(self.test, info)

    def _test_row(self, name: str, info: str) -> bool:
        """A named row: a new test and its overall result; False when the run is full."""
        self.flush()
        if len(self.run.tests) >= MAX_TESTS:
            return False
        self.test = DiagTest(name, self.category)
        entry = test_info(name)
        self.test.plugin = entry["name"] if entry else None
        self.run.tests.append(self.test)
        _result_row(self.test, info, overall=True)
        return True


def parse_text(text: str) -> DiagRun:
    reader = _TextReader()
    for line in text.splitlines():
        if not reader.line(line):
            break
    reader.flush()
    return reader.run


def _result_row(test: DiagTest, info: str, overall: bool = False) -> None:
    new = _STATUS_NEW.match(info)
    if new:
        if new.group("entity").upper() == "GPU":
            test.results[int(new.group("id"))] = _status(new.group("status"))
        return
    old = _STATUS_OLD.match(info)
    if old:
        status = _status(old.group("status"))
        ids = old.group("ids")
        if ids:
            for part in ids.replace(" ", "").split(","):
                if part.isdigit():
                    test.results[int(part)] = status
            if overall or test.status is None:
                test.status = test.status if test.status == "fail" else status
        elif overall or test.status is None:
            test.status = status
        if status == "fail":
            test.status = "fail"
        return
    if overall and info:
        test.status = _status(info.split()[0])


# -- JSON --------------------------------------------------------------------------------------------
def _json_messages(entry: dict, key: str, kind: str, gpu: int | None) -> list[DiagMessage]:
    out = []
    for item in entry.get(key) or []:
        if isinstance(item, dict):
            text = str(item.get("warning") or item.get("info") or "")
            code = item.get("error_id")
            out.append(_message(kind, text, gpu, code if isinstance(code, int) and code > 0 else None))
        elif isinstance(item, str):
            out.append(_message(kind, item, gpu))
    return out


def _json_gpu(result: dict) -> list[int]:
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU")).upper()
        return [int(result["entity_id"])] if group == "GPU" and str(result["entity_id"]).isdigit() else []
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if isinstance(ids, int):
        return [ids]
    return [int(p) for p in str(ids or "").replace(" ", "").split(",") if p.isdigit()]


def _json_test(t: dict, category: str | None) -> DiagTest:
    """One test of a JSON result: per GPU status and messages, then its 4.x ``test_summary``."""
    test = DiagTest(str(t.get("name", "?")), category)
    entry = test_info(test.name)
    test.plugin = entry["name"] if entry else None
    for result in t.get("results") or []:
        if not isinstance(result, dict):
            continue
        gpus = _json_gpu(result)
        status = _status(str(result.get("status", "")))
        for g in gpus:
            test.results[g] = status
        one = gpus[0] if len(gpus) == 1 else None
        test.messages += _json_messages(result, "warnings", "warning", one)
        test.messages += _json_messages(result, "info", "info", one)
    summary = t.get("test_summary")
    if isinstance(summary, dict):
        test.status = _status(str(summary.get("status", ""))) or None
        seen = {m.text for m in test.messages}
        test.messages += [m for m in _json_messages(summary, "warnings", "warning", None) if m.text not in seen]
    return test


def _json_tests(body: dict, run: DiagRun) -> None:
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        for t in cat.get("tests") or []:
            if isinstance(t, dict) and len(run.tests) < MAX_TESTS:
                run.tests.append(_json_test(t, cat.get("category")))


def _json_document(text: str) -> dict:
    """The JSON object of a ``dcgmi diag -j`` output (text before it, such as a prompt, skipped)."""
    start = text.find("{")
    if start < 0:
        raise DcgmDiagError("no JSON object in this dcgmi diag -j output")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise DcgmDiagError(f"dcgmi diag -j output is not valid JSON at line {exc.lineno + text[:start].count(chr(10))}: "
                            f"{exc.msg}") from None
    if not isinstance(doc, dict):
        raise DcgmDiagError("dcgmi diag -j output: expected a JSON object")
    return doc


def _json_header(run: DiagRun, d: dict, body: dict) -> None:
    """The run's runtime error and versions, the first one given across iterations kept."""
    run.runtime_error = run.runtime_error or body.get("runtime_error")
    run.dcgm_version = run.dcgm_version or body.get("version")
    run.driver_version = run.driver_version or body.get("Driver Version Detected") or body.get("driver_version_detected")
    meta = d.get("metadata")
    if isinstance(meta, dict):
        run.dcgm_version = run.dcgm_version or meta.get("version")
        run.driver_version = run.driver_version or meta.get("Driver Version Detected")


def parse_json(text: str) -> DiagRun:
    doc = _json_document(text)
    run = DiagRun("json")
    docs = [it for it in doc.get("iterations") or [] if isinstance(it, dict)] or [doc]
    if "Overall Result" in doc:
        run.overall = _status(str(doc["Overall Result"]))
    for d in docs:
        body = d.get("DCGM Diagnostic") or d.get("DCGM GPU Diagnostic")
        if not isinstance(body, dict):
            continue
        _json_header(run, d, body)
        _json_tests(body, run)
    if not run.tests and run.runtime_error is None:
        raise DcgmDiagError("dcgmi diag -j output holds no test results (no \"DCGM Diagnostic\" or "
                            "\"DCGM GPU Diagnostic\" section)")
    return run


def looks_like_dcgm_diag(text: str) -> str | None:
    """``"json"`` or ``"text"`` when ``text`` is a dcgmi diag output, else None."""
    head = text[:1 << 16]
    if '"DCGM GPU Diagnostic"' in head or '"DCGM Diagnostic"' in head:
        return "json"
    if ("| Diagnostic" in head and "| Result" in head) or re.search(r"^[|+]-{5}\s+(Deployment|Hardware|Integration|Stress)\s", head, re.M):
        return "text"
    if re.search(r"^\|\s.{0,40}\|\s(?:Pass|Fail|Warn|Skip)(?: - (?:All|GPUs?:?))?", head, re.M):
        return "text"
    return None


def parse_dcgm_diag(text: str) -> DiagRun:
    form = looks_like_dcgm_diag(text)
    if form is None:
        raise DcgmDiagError("not a dcgmi diag output (no result table, no \"DCGM Diagnostic\" JSON)")
    run = parse_json(text) if form == "json" else parse_text(text)
    if not run.tests and run.runtime_error is None:
        raise DcgmDiagError("dcgmi diag output with no test rows")
    return run
