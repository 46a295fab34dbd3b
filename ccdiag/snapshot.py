"""The snapshot: everything the probes read from a host, in one tar file that replays anywhere.

Layout of the archive (gzip-compressed tar)::

    meta.json        tool version, time, host, kernel, format, epochs, synthesized or recorded
    fs/...           the files, directories and symlinks read in epoch 0, at their real paths
    index.json       directory listings, read errors, later epochs' file values, kernel log,
                     network interfaces, statvfs results, recorded environment
    commands.json    each command: epoch, argv, rc, stdout, stderr, duration, timed_out, error
    nvml.json        each NVML call: epoch, [function, *args], and its value or its error class

An *epoch* is one sampling pass. ``ccdiag check --window 5`` reads counters, waits, and reads them
again: the second pass is epoch 1, so a replay sees the counter rise exactly as recorded. Values not
re-read in a later epoch fall back to the latest earlier one.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any

FORMAT = "ccdiag-snapshot"
FORMAT_VERSION = 1


class SnapshotError(Exception):
    """A snapshot file that cannot be used (missing, not a snapshot, corrupt, newer format)."""


def _encode_bytes(data: bytes) -> dict:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def _decode_bytes(obj: dict) -> bytes:
    if "text" in obj:
        return obj["text"].encode("utf-8")
    return base64.b64decode(obj["b64"])


@dataclass
class SnapshotData:
    """In-memory form of a snapshot. Paths are absolute host paths ("/sys/..."), already resolved."""

    meta: dict = field(default_factory=dict)
    # files[epoch][real_path] = bytes, or an error dict {"kind", "errno", "message"}
    files: dict[int, dict[str, Any]] = field(default_factory=lambda: {0: {}})
    links: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    listings: dict[str, list[str]] = field(default_factory=dict)
    commands: list[dict] = field(default_factory=list)
    nvml: list[dict] = field(default_factory=list)
    kmsg: dict[int, dict] = field(default_factory=dict)  # epoch -> {"lines": [...]} | {"error": {...}}
    net: dict[int, dict] = field(default_factory=dict)  # epoch -> psutil facts | {"error": ...}
    statvfs: dict[str, dict] = field(default_factory=dict)
    environ: dict[str, str] | None = None

    # -- building -------------------------------------------------------------------
    def put_file(self, path: str, data: bytes | str, epoch: int = 0) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        self.files.setdefault(epoch, {})[path] = data
        self._add_parents(path)

    def put_error(self, path: str, kind: str, errno_: int | None, message: str, epoch: int = 0) -> None:
        self.files.setdefault(epoch, {})[path] = {"kind": kind, "errno": errno_, "message": message}
        self._add_parents(path)

    def put_link(self, path: str, target: str) -> None:
        self.links[path] = target
        self._add_parents(path)

    def put_dir(self, path: str) -> None:
        if path != "/":
            self.dirs.add(path)
            self._add_parents(path)

    def _add_parents(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        while parent and parent not in self.dirs:
            self.dirs.add(parent)
            parent = parent.rsplit("/", 1)[0]

    @property
    def epochs(self) -> int:
        seen = [0, *self.files, *self.kmsg, *self.net]
        seen += [c.get("epoch", 0) for c in self.commands] + [c.get("epoch", 0) for c in self.nvml]
        return max(seen) + 1

    # -- writing --------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        # mtime fixed so that the same content gives the same archive (diffable, cacheable)
        mtime = int(self.meta.get("time_epoch", 0) or 0)
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            def add_bytes(name: str, data: bytes) -> None:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = mtime
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))

            meta = dict(self.meta)
            meta.update(format=FORMAT, format_version=FORMAT_VERSION, epochs=self.epochs)
            add_bytes("meta.json", json.dumps(meta, indent=1, sort_keys=True).encode())
            for d in sorted(self.dirs):
                info = tarfile.TarInfo("fs" + d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                info.mtime = mtime
                tar.addfile(info)
            for p, target in sorted(self.links.items()):
                info = tarfile.TarInfo("fs" + p)
                info.type = tarfile.SYMTYPE
                info.linkname = target
                info.mtime = mtime
                tar.addfile(info)
            errors: dict[str, dict] = {}
            later: dict[str, dict] = {}
            for epoch in sorted(self.files):
                for p, value in sorted(self.files[epoch].items()):
                    if isinstance(value, dict):
                        errors.setdefault(str(epoch), {})[p] = value
                    elif epoch == 0:
                        add_bytes("fs" + p, value)
                    else:
                        later.setdefault(str(epoch), {})[p] = _encode_bytes(value)
            index = {
                "listings": {k: sorted(v) for k, v in sorted(self.listings.items())},
                "fs_errors": errors,
                "files_later": later,
                "kmsg": {str(k): v for k, v in sorted(self.kmsg.items())},
                "net": {str(k): v for k, v in sorted(self.net.items())},
                "statvfs": self.statvfs,
                "environ": self.environ,
            }
            add_bytes("index.json", json.dumps(index, indent=1, sort_keys=True).encode())
            add_bytes("commands.json", json.dumps(self.commands, indent=1).encode())
            add_bytes("nvml.json", json.dumps(self.nvml, indent=1).encode())
        # gzip with a fixed header time: the same content always gives the same bytes
        return gzip.compress(buf.getvalue(), compresslevel=6, mtime=mtime)

    def save(self, path: str) -> None:
        data = self.to_bytes()
        with open(path, "wb") as fh:
            fh.write(data)

    # -- reading --------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<snapshot>") -> "SnapshotData":
        snap = cls()
        try:
            tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
        except (tarfile.TarError, EOFError, OSError) as exc:
            first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
            raise SnapshotError(f"{name}: not a ccdiag snapshot (not a readable tar archive: {first})") from None
        docs: dict[str, Any] = {}
        try:
            with tar:
                for member in tar:
                    mname = member.name
                    if mname.startswith("./"):
                        mname = mname[2:]
                    if mname in ("meta.json", "index.json", "commands.json", "nvml.json"):
                        fh = tar.extractfile(member)
                        docs[mname] = json.loads(fh.read().decode("utf-8")) if fh else None
                    elif mname == "fs" or mname.startswith("fs/"):
                        path = mname[2:] or "/"
                        if member.isdir():
                            snap.put_dir(path)
                        elif member.issym():
                            snap.put_link(path, member.linkname)
                        elif member.isfile():
                            fh = tar.extractfile(member)
                            snap.put_file(path, fh.read() if fh else b"")
        except (tarfile.TarError, EOFError, OSError, ValueError, UnicodeDecodeError) as exc:
            raise SnapshotError(f"{name}: corrupt snapshot ({type(exc).__name__}: {exc})") from None
        meta = docs.get("meta.json")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise SnapshotError(f"{name}: not a ccdiag snapshot (meta.json missing or of another format)")
        try:
            version = int(meta.get("format_version", 0))
        except (TypeError, ValueError):
            raise SnapshotError(f"{name}: corrupt snapshot (format_version {meta.get('format_version')!r})") from None
        if version > FORMAT_VERSION:
            raise SnapshotError(
                f"{name}: snapshot format {version} is newer than this ccdiag "
                f"understands ({FORMAT_VERSION}); upgrade ccdiag")
        try:
            snap._fill(meta, docs)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise SnapshotError(f"{name}: corrupt snapshot (malformed {type(exc).__name__}: {exc})") from None
        return snap

    def _fill(self, meta: dict, docs: dict) -> None:
        """Populate from the JSON members, checking their shapes (a hand-edited or damaged file
        must be refused as bad input, never crash a replay later)."""
        snap = self
        snap.meta = meta
        index = docs.get("index.json") or {}
        if not isinstance(index, dict):
            raise TypeError("index.json is not an object")
        snap.listings = {}
        for k, v in (index.get("listings") or {}).items():
            if not isinstance(v, list):
                raise TypeError(f"listing of {k} is not a list")
            snap.listings[str(k)] = [str(n) for n in v]
        for epoch, errs in (index.get("fs_errors") or {}).items():
            for p, err in errs.items():
                if not isinstance(err, dict):
                    raise TypeError(f"read error of {p} is not an object")
                snap.put_error(p, err.get("kind", "io"), err.get("errno"), err.get("message", ""), int(epoch))
        for epoch, files in (index.get("files_later") or {}).items():
            for p, enc in files.items():
                snap.put_file(p, _decode_bytes(enc), int(epoch))
        snap.kmsg = {int(k): dict(v) for k, v in (index.get("kmsg") or {}).items()}
        snap.net = {int(k): dict(v) for k, v in (index.get("net") or {}).items()}
        snap.statvfs = dict(index.get("statvfs") or {})
        env = index.get("environ")
        snap.environ = {str(k): str(v) for k, v in env.items()} if env is not None else None
        commands = docs.get("commands.json") or []
        nvml = docs.get("nvml.json") or []
        if not isinstance(commands, list) or not isinstance(nvml, list):
            raise TypeError("commands.json / nvml.json are not lists")
        for rec in commands:
            if not isinstance(rec, dict) or not isinstance(rec.get("argv"), list):
                raise TypeError("a command record without an argv list")
        for rec in nvml:
            if not isinstance(rec, dict) or not isinstance(rec.get("call"), list) or not rec["call"]:
                raise TypeError("an NVML record without a call list")
        snap.commands = list(commands)
        snap.nvml = list(nvml)

    @classmethod
    def load(cls, path: str) -> "SnapshotData":
        from ccdiag.userfiles import UserFileError, read_user_bytes

        try:
            data = read_user_bytes(path, "snapshot")
        except UserFileError as exc:
            raise SnapshotError(str(exc)) from None
        return cls.from_bytes(data, name=path)


def base_meta(**extra: Any) -> dict:
    """Metadata every snapshot starts with."""
    from ccdiag import __version__

    now = time.time()
    meta = {
        "tool": "ccdiag",
        "tool_version": __version__,
        "time_epoch": round(now, 3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }
    meta.update(extra)
    return meta
