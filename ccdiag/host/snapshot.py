"""The snapshot: everything the probes read from a host, in one tar file that replays anywhere.

Layout of the archive (gzip-compressed tar), format 2 (what this module writes)::

    meta.json        tool version, time, host, kernel, format, format_version, epochs, synthesized
    fs.json          the file table of epoch 0: {"dirs": [path...], "links": {path: target},
                     "files": {"paths": [path...], "sizes": [bytes...]}} (real host paths)
    fs.data          the files' contents, concatenated in the order of "files.paths"
    index.json       directory listings, read errors, later epochs' file values, kernel log,
                     network interfaces, statvfs results, recorded environment
    commands.json    each command: epoch, argv, rc, stdout, stderr, duration, timed_out, error
    nvml.json        each NVML call: epoch, [function, *args], and its value or its error class

Format 1 (still read) held each file, directory and symlink of epoch 0 as its own tar member under
``fs/`` at its real path, with no fs.json/fs.data. Why format 2: a node with 3,000 RDMA devices has
about 300,000 such entries; as tar members they unpacked to 456 MB (a 512-byte header and a padded
data block each) and took 15 s to read, where one table and one blob unpack to a few tens of MB and
read in one pass.

An *epoch* is one sampling pass. ``ccdiag check --window 5`` reads counters, waits, and reads them
again: the second pass is epoch 1, so a replay sees the counter rise exactly as recorded. Values not
re-read in a later epoch fall back to the latest earlier one.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import gzip
import io
import itertools
import json
import math
import os
import re
import struct
import tarfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ccdiag.core.errors import UserInputError


FORMAT = "ccdiag-snapshot"
FORMAT_VERSION = 2
_DOCS = ("meta.json", "index.json", "commands.json", "nvml.json", "fs.json")
#: the member holding the file contents of format 2 (bytes, not JSON)
_FS_DATA = "fs.data"


class SnapshotError(UserInputError):
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
    #: provider -> {"text": answer} | {"error": {...}} of its instance metadata service (ccdiag.host.imds)
    imds: dict[str, dict] = field(default_factory=dict)

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
            table, blob = self._file_table()
            add_bytes("fs.json", json.dumps(table, separators=(",", ":")).encode())
            add_bytes(_FS_DATA, blob)
            errors: dict[str, dict] = {}
            later: dict[str, dict] = {}
            for epoch in sorted(self.files):
                for p, value in sorted(self.files[epoch].items()):
                    if isinstance(value, dict):
                        errors.setdefault(str(epoch), {})[p] = value
                    elif epoch == 0:
                        continue  # in fs.json / fs.data
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
            if self.imds:  # only when asked: snapshots without it keep their bytes
                index["imds"] = self.imds
            # compact: a 256-GPU node records 373,000 NVML calls, and indented they were 40 MB to
            # read back (every reader takes either form)
            add_bytes("index.json", json.dumps(index, separators=(",", ":"), sort_keys=True).encode())
            add_bytes("commands.json", json.dumps(self.commands, indent=1).encode())
            add_bytes("nvml.json", json.dumps(self.nvml, separators=(",", ":")).encode())
        # gzip with a fixed header time: the same content always gives the same bytes
        return gzip.compress(buf.getvalue(), compresslevel=6, mtime=mtime)

    def _file_table(self) -> tuple[dict, bytes]:
        """Format 2's ``fs.json`` table and ``fs.data`` blob: epoch 0's files (contents concatenated
        in path order), every directory and every symlink."""
        files = sorted((p, v) for p, v in self.files.get(0, {}).items() if isinstance(v, bytes))
        table = {"dirs": sorted(self.dirs), "links": dict(sorted(self.links.items())),
                 "files": {"paths": [p for p, _ in files], "sizes": [len(v) for _, v in files]}}
        return table, b"".join(v for _, v in files)

    def save(self, path: str, mode: int = 0o600) -> None:
        """Write the snapshot atomically (a full disk leaves the old file whole), for its owner
        only by default: it carries the kernel log, host names and serials. Temporaries that an
        earlier writer killed mid-write left in the same directory are removed first."""
        from ccdiag.core.output import write_atomic

        sweep_stale_temporaries(os.path.dirname(os.path.abspath(path)) or ".")
        write_atomic(path, self.to_bytes(), mode)

    # -- reading --------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<snapshot>") -> "SnapshotData":
        """Read and check a snapshot: the archive's integrity first (the whole gzip stream, so its
        CRC is verified; the tar must end in its end-of-archive blocks), then every member's shape
        (:mod:`ccdiag.snapshotcheck`). Anything wrong is a SnapshotError naming the member/field."""
        with gc_paused():
            return cls._from_bytes(data, name)

    @classmethod
    def _from_bytes(cls, data: bytes, name: str) -> "SnapshotData":
        snap = cls()
        try:
            raw = gunzip_verified(data)
        except ShapeError as exc:
            raise SnapshotError(f"{name}: corrupt snapshot ({exc})") from None
        docs: dict[str, Any] = {}
        try:
            scanned = scan_tar(raw)
            if scanned is not None:
                snap._take_members(raw, scanned[0], docs)
                check_tar_end(raw, scanned[1])
            else:
                snap._take_members_tarfile(raw, name, docs)
            del raw  # what is kept has been copied out: the unpacked archive need not outlive this
        except ShapeError as exc:
            raise SnapshotError(f"{name}: corrupt snapshot ({exc})") from None
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
        except ShapeError as exc:
            raise SnapshotError(f"{name}: corrupt snapshot ({exc})") from None
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise SnapshotError(f"{name}: corrupt snapshot (malformed {type(exc).__name__}: {exc})") from None
        return snap

    def _take_members(self, raw: bytes, members: list, docs: dict) -> None:
        """Members found by the fast pass (:func:`scan_tar`): JSON documents into
        ``docs``, fs/ entries into this snapshot. Parent directories are added once per new
        directory, so this is linear in the number of members."""
        for m in members:
            mname = m.name[2:] if m.name.startswith("./") else m.name
            if mname in _DOCS or mname == _FS_DATA:
                if m.kind != "file":
                    raise ShapeError(f"{mname}: not a regular file")
                body = raw[m.start:m.start + m.size]
                docs[mname] = body if mname == _FS_DATA else load_json(body, mname)
            elif mname == "fs" or mname.startswith("fs/"):
                path = mname[2:] or "/"
                if m.kind == "dir":
                    self.put_dir(path)
                elif m.kind == "sym":
                    self.put_link(path, m.linkname)
                else:
                    self.put_file(path, raw[m.start:m.start + m.size])

    def _take_members_tarfile(self, raw: bytes, name: str, docs: dict) -> None:
        """The same through ``tarfile``, for archives the fast pass does not read (another tool's
        tar, or a damaged one: its refusals are tarfile's, as they always were)."""
        try:
            tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")
        except (tarfile.TarError, EOFError, OSError) as exc:
            first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
            raise SnapshotError(f"{name}: not a ccdiag snapshot (not a readable tar archive: {first})") from None
        with tar:
            for member in tar:
                mname = member.name
                if mname.startswith("./"):
                    mname = mname[2:]
                if mname in _DOCS or mname == _FS_DATA:
                    # a symlink here would make extractfile look up its target (KeyError when absent)
                    if not member.isfile():
                        raise ShapeError(f"{mname}: not a regular file")
                    fh = tar.extractfile(member)
                    body = fh.read() if fh else b""
                    docs[mname] = body if mname == _FS_DATA else load_json(body, mname)
                elif mname == "fs" or mname.startswith("fs/"):
                    path = mname[2:] or "/"
                    if member.isdir():
                        self.put_dir(path)
                    elif member.issym():
                        self.put_link(path, member.linkname)
                    elif member.isfile():
                        fh = tar.extractfile(member)
                        self.put_file(path, fh.read() if fh else b"")
            check_tar_end(raw, tar.offset)

    def _fill(self, meta: dict, docs: dict) -> None:
        """Populate from the JSON members, checking their shapes (a hand-edited or damaged file
        must be refused as bad input, never crash a replay later)."""
        check_meta(meta)
        self.meta = meta
        index = docs.get("index.json") or {}
        need(isinstance(index, dict), "index.json", "", "an object", index)
        self._take_table(docs.get("fs.json"), docs.get(_FS_DATA))
        self._take_listings(_index_section(index, "listings"))
        self._take_fs_errors(_index_section(index, "fs_errors"))
        self._take_files_later(_index_section(index, "files_later"))
        self.kmsg = _by_epoch(_index_section(index, "kmsg"), "kmsg", check_kmsg)
        self.net = _by_epoch(_index_section(index, "net"), "net", check_net)
        self._take_statvfs(_index_section(index, "statvfs"))
        self._take_environ(index.get("environ"))
        self._take_imds(_index_section(index, "imds"))
        self._take_runs(docs.get("commands.json") or [], docs.get("nvml.json") or [])

    def _take_listings(self, listings: dict) -> None:
        """Directory listings: each a list of names."""
        self.listings = {}
        for k, v in listings.items():
            need(isinstance(v, list) and all(isinstance(n, str) for n in v), "index.json", f"listings.{k}",
                 "a list of names", v)
            self.listings[str(k)] = list(v)

    def _take_fs_errors(self, fs_errors: dict) -> None:
        """The read errors of each epoch, per path."""
        ix = "index.json"
        for epoch, errs in fs_errors.items():
            e = epoch_key(epoch, ix, "fs_errors")
            need(isinstance(errs, dict), ix, f"fs_errors.{epoch}", "an object", errs)
            for p, err in errs.items():
                check_read_error(err, ix, f"fs_errors.{epoch}.{p}")
                if len(err) == 3 and "kind" in err and "errno" in err and "message" in err:
                    # already the record put_error would build: kept, not copied (a large node has
                    # tens of thousands, and copies left the parsed ones as holes in the heap)
                    self.files.setdefault(e, {})[p] = err
                    self._add_parents(p)
                else:
                    self.put_error(p, err.get("kind", "io"), err.get("errno"), err.get("message", ""), e)

    def _take_files_later(self, files_later: dict) -> None:
        """The files read again in later epochs, each as text or base64."""
        ix = "index.json"
        for epoch, files in files_later.items():
            e = epoch_key(epoch, ix, "files_later")
            need(isinstance(files, dict), ix, f"files_later.{epoch}", "an object", files)
            for p, enc in files.items():
                ok = isinstance(enc, dict) and (isinstance(enc.get("text"), str) or isinstance(enc.get("b64"), str))
                need(ok, ix, f"files_later.{epoch}.{p}", 'an object with "text" or "b64"', enc)
                try:
                    self.put_file(p, _decode_bytes(enc), e)
                except ValueError:
                    raise ShapeError(f"{ix}: files_later.{epoch}.{p}: b64 is not base64") from None

    def _take_statvfs(self, statvfs: dict) -> None:
        """The file systems' statvfs records, per mount point."""
        for p, rec in statvfs.items():
            check_statvfs(p, rec)
        self.statvfs = dict(statvfs)

    def _take_environ(self, env: Any) -> None:
        """The process environment, when it was recorded (None when not)."""
        need(env is None or isinstance(env, dict) and all(isinstance(v, str) for v in env.values()),
             "index.json", "environ", "an object of text values", env)
        self.environ = {str(k): v for k, v in env.items()} if env is not None else None

    def _take_imds(self, imds: dict) -> None:
        """The instance metadata service's answers, each a text or a read error."""
        self.imds = {}
        for k, rec in imds.items():
            ok = isinstance(rec, dict) and (isinstance(rec.get("text"), str) or "error" in rec)
            need(ok, "index.json", f"imds.{k}", 'an object with "text" or "error"', rec)
            if "error" in rec:
                check_read_error(rec["error"], "index.json", f"imds.{k}.error")
            self.imds[str(k)] = dict(rec)

    def _take_runs(self, commands: Any, nvml: Any) -> None:
        """The commands run and the NVML calls made, each record checked."""
        need(isinstance(commands, list), "commands.json", "", "a list", commands)
        need(isinstance(nvml, list), "nvml.json", "", "a list", nvml)
        for k, rec in enumerate(commands):
            check_command(rec, k)
        for k, rec in enumerate(nvml):
            check_nvml(rec, k)
        self.commands = list(commands)
        self.nvml = list(nvml)

    def _take_table(self, table: Any, blob: bytes | None) -> None:
        """Format 2's file table (``fs.json``) and contents (``fs.data``), checked and taken in one
        pass; the same meaning as format 1's ``fs/`` members (parents of every path are directories).
        The checks run over whole lists at C speed: no Python object per file but its path and bytes."""
        if table is None and blob is None:
            return
        m = "fs.json"
        need(isinstance(table, dict), m, "", "an object", table)
        need(blob is not None, _FS_DATA, "", "the file contents member", None)
        assert blob is not None
        dirs, links, files = table.get("dirs", []), table.get("links", {}), table.get("files", {})
        need(_absolute_paths(dirs), m, "dirs", "a list of absolute paths", dirs)
        need(isinstance(links, dict) and _absolute_paths(list(links))
             and set(map(type, links.values())) <= {str}, m, "links", "an object of absolute path: link target", links)
        need(isinstance(files, dict), m, "files", 'an object {"paths": [...], "sizes": [...]}', files)
        paths, sizes = files.get("paths", []), files.get("sizes", [])
        need(_absolute_paths(paths), m, "files.paths", "a list of absolute paths", paths)
        need(isinstance(sizes, list) and len(sizes) == len(paths) and set(map(type, sizes)) <= {int}
             and min(sizes, default=0) >= 0, m, "files.sizes", "a list of sizes, one per path", sizes)
        if sum(sizes) != len(blob):
            raise ShapeError(f"{_FS_DATA}: {len(blob)} bytes where fs.json's files.sizes add up to {sum(sizes)}")
        ends = list(itertools.accumulate(sizes))
        store = self.files.setdefault(0, {})
        store.update(zip(paths, map(blob.__getitem__, map(slice, [0, *ends[:-1]], ends))))
        self.dirs.update(d for d in dirs if d != "/")
        self.links.update(links)
        self._add_all_parents([dirs, links, paths])

    def _add_all_parents(self, groups: list) -> None:
        """Every parent directory of every path in ``groups`` (one set lookup for a path whose parent
        is already known: linear in the number of paths)."""
        known = self.dirs
        for group in groups:
            for path in group:
                parent = path.rpartition("/")[0]
                if parent and parent not in known:
                    self._add_parents(path)

    @classmethod
    def load(cls, path: str) -> "SnapshotData":
        from ccdiag.core.userfiles import UserFileError, read_user_bytes

        try:
            data = read_user_bytes(path, "snapshot")
        except UserFileError as exc:
            raise SnapshotError(str(exc)) from None
        return cls.from_bytes(data, name=path)


@contextlib.contextmanager
def gc_paused():
    """The cyclic garbage collector off while a large tree of new objects is built (a snapshot's
    JSON, its indexes): each collection would walk every object built so far, and on a 256-GPU
    snapshot that doubled the time to read it. JSON trees hold no cycles; reference counting
    frees them as before. Nesting keeps the outermost caller's setting."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


#: a temporary of a writer on another host (a shared directory) is left alone this long
FOREIGN_TEMP_MAX_AGE_S = 24 * 3600


def sweep_stale_temporaries(directory: str) -> list[str]:
    """Remove the temporaries of :func:`ccdiag.core.output.write_atomic` in ``directory`` whose writer
    is gone, and return their names.

    A writer killed with SIGKILL (the OOM killer, a job's hard limit) leaves a hidden full-size
    ``.ccdiag-<host>-<pid>-*`` behind; one whose pid no longer runs on this host is stale. A
    temporary of another host, or in the older ``.ccdiag-*`` form without a pid, is removed only
    when older than :data:`FOREIGN_TEMP_MAX_AGE_S`. Only files owned by this user are touched."""
    import re
    import stat

    from ccdiag.core.output import TEMP_PREFIX, _host_token

    removed: list[str] = []
    mine = re.compile(re.escape(TEMP_PREFIX) + re.escape(_host_token()) + r"-(\d+)-")
    try:
        names = [n for n in os.listdir(directory) if n.startswith(TEMP_PREFIX)]
    except OSError:
        return removed
    now = time.time()
    for name in names:
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            continue
        m = mine.match(name)
        if m is not None:
            pid = int(m.group(1))
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
                continue  # its writer may still be writing
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        elif now - st.st_mtime < FOREIGN_TEMP_MAX_AGE_S:
            continue
        try:
            os.unlink(path)
            removed.append(name)
        except OSError:
            pass
    return removed


def _absolute_paths(value: Any) -> bool:
    """``value`` is a list of text paths starting with "/" (checked at C speed over the list)."""
    return isinstance(value, list) and set(map(type, value)) <= {str} and all(map(str.startswith, value, itertools.repeat("/")))


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


# ---------------------------------------------------------------------------------------------
# Checking a snapshot before any probe sees it
#
# Checking a snapshot before any probe sees it: archive integrity, then the shape of every member.
#
# Why a separate pass: a snapshot comes from another site, a ticket or a damaged disk. A flipped byte,
# a tar cut mid-member or a hand-edited JSON value must end as one clear refusal (exit 2) naming the
# member and the field, never as a wrong verdict or as an exception deep inside a probe. So:
#
# * the whole gzip stream is read (its CRC and length are verified only at its end) with a bound on
#   the unpacked size (:data:`MAX_UNPACKED_BYTES`), and the tar must end in its end-of-archive blocks
#   with nothing but zero padding after them (``tarfile`` stops silently at a damaged header);
# * JSON is read without NaN/Infinity and refused beyond :data:`MAX_JSON_DEPTH` levels of nesting
#   (deeper documents raise RecursionError in the decoder or in any code that walks them);
# * every record is checked against the shape the replay host and the probes rely on (types, ranges).



#: the most bytes a snapshot may unpack to (a large node's snapshot unpacks to a few tens of MB)
MAX_UNPACKED_BYTES = 512 << 20
#: the deepest JSON nesting a member may have (the format itself needs 4)
MAX_JSON_DEPTH = 32
#: the most sampling passes a snapshot may carry (``--window`` records 2)
MAX_EPOCHS = 64
#: the largest integer a recorded value may be (a u64 counter fits)
MAX_INT = 1 << 64


class ShapeError(ValueError):
    """A member whose content is not what the format says; ``str()`` names the member and field."""


def gunzip_verified(data: bytes) -> bytes:
    """The whole gzip stream unpacked (CRC and length checked) or, for an uncompressed tar, ``data``.
    Raises ShapeError naming what is wrong."""
    if data[:2] != b"\x1f\x8b":
        return data
    whole = _gunzip_one_member(data)
    if whole is not None:
        return whole
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=_Reader(data)) as gz:
            while True:
                chunk = gz.read(1 << 20)
                if not chunk:
                    break
                out += chunk
                if len(out) > MAX_UNPACKED_BYTES:
                    raise ShapeError(f"unpacks to more than {MAX_UNPACKED_BYTES} bytes (MAX_UNPACKED_BYTES)")
    except (OSError, EOFError, zlib.error) as exc:
        why = str(exc) or type(exc).__name__
        if isinstance(exc, EOFError):
            why = "compressed stream ends before its end marker (file cut short)"
        raise ShapeError(f"damaged gzip data: {why}") from None
    return bytes(out)


def _gunzip_one_member(data: bytes) -> bytes | None:
    """The common case at C speed and with one copy of the output: a single gzip member, ending
    exactly at the end of ``data``, whose CRC and length zlib verifies, within the size bound. None
    for anything else (several members, damage, an oversized stream): the caller's stream reader
    then decides, with the refusals it always gave."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, MAX_UNPACKED_BYTES + 1)
    except zlib.error:
        return None
    if not inflater.eof or inflater.unused_data or inflater.unconsumed_tail or len(out) > MAX_UNPACKED_BYTES:
        return None
    return out


class _Reader:
    """A minimal file object over bytes (io.BytesIO would do; kept explicit for GzipFile)."""

    def __init__(self, data: bytes):
        import io

        self._io = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._io.read(n)

    def seek(self, *a):
        return self._io.seek(*a)

    def tell(self) -> int:
        return self._io.tell()


def check_tar_end(raw: bytes, offset: int) -> None:
    """After ``tarfile`` stopped at ``offset``: the archive must end there in zero blocks (its
    end-of-archive marker and padding); anything else is a damaged header or trailing garbage."""
    rest = raw[offset:]
    if len(rest) < 1024 or rest.strip(b"\0"):
        if rest.strip(b"\0"):
            raise ShapeError(f"damaged tar header or trailing data at byte {offset} of {len(raw)} "
                             "(the archive does not end in its end-of-archive blocks there)")
        raise ShapeError(f"tar archive cut short at byte {len(raw)} (no end-of-archive blocks)")


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


#: members whose every value is checked flat, by type, right after parsing (nothing walks them
#: recursively): the nesting bound is not needed there, and fs.json is the largest member
_FLAT_CHECKED = ("fs.json",)


def load_json(raw: bytes, member: str):
    """``raw`` decoded as UTF-8 JSON, no NaN/Infinity, nesting at most :data:`MAX_JSON_DEPTH`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ShapeError(f"{member}: not UTF-8 text (byte {exc.start})") from None
    depth = _bracket_depth(raw) if member not in _FLAT_CHECKED else 0
    if depth > MAX_JSON_DEPTH:
        raise ShapeError(f"{member}: JSON nested {depth} levels deep, more than {MAX_JSON_DEPTH} (MAX_JSON_DEPTH)")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ShapeError(f"{member}: not valid JSON ({str(exc)[:120]})") from None


#: every byte but the brackets and the quote, for bytes.translate to drop
_NOT_BRACKET_OR_QUOTE = bytes(b for b in range(256) if b not in b'[]{}"')
_JSON_STRING = re.compile(rb'"[^"]*"')
_BRACES_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_BRACKET_STEP = {ord("["): 1, ord("]"): -1}


def _bracket_depth(raw: bytes) -> int:
    """Deepest nesting of [ and { outside strings (at most MAX_JSON_DEPTH + 1 is told exactly);
    linear, without recursion, and at C speed over the bytes: escaped backslashes, then escaped
    quotes are removed (left to right, as JSON reads them), every byte but brackets and quotes is
    dropped, then what stands between two quotes (empty pairs first, by a plain replace: an empty
    pair is a string without brackets, or one string's end and the next one's start with only
    separators between); innermost bracket pairs are then peeled one level at a time (braces
    counted as brackets). A document the peeling cannot finish (brackets that do not match) is
    measured bracket by bracket; its JSON is refused when it is parsed anyway."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = raw.translate(None, _NOT_BRACKET_OR_QUOTE).replace(b'""', b"")
    if b'"' in kept:
        kept = _JSON_STRING.sub(b"", kept)
    brackets = kept.translate(_BRACES_AS_BRACKETS)
    depth = 0
    while brackets and depth <= MAX_JSON_DEPTH:
        peeled = brackets.replace(b"[]", b"")
        if len(peeled) == len(brackets):
            break
        brackets, depth = peeled, depth + 1
    if not brackets:
        return depth
    return max(itertools.accumulate(map(_BRACKET_STEP.get, brackets, itertools.repeat(0))), default=0) + depth


# -- shapes ----------------------------------------------------------------------------------------
def _where(member: str, field: str) -> str:
    """``member: field``, the field (built from the snapshot's own keys) clipped and with control
    characters escaped: a refusal is one printable line."""
    if not field:
        return member
    field = field if len(field) <= 120 else field[:117] + "..."
    return f"{member}: " + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in field)


def need_str(value, member: str, field: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise ShapeError(f"{_where(member, field)}: expected text, got {_kind(value)}")


def need_int(value, member: str, field: str, optional: bool = False, lo: int = -MAX_INT, hi: int = MAX_INT) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapeError(f"{_where(member, field)}: expected an integer, got {_kind(value)}")
    if not lo <= value <= hi:
        raise ShapeError(f"{_where(member, field)}: {value} is out of range ({lo}..{hi})")


def need_number(value, member: str, field: str, optional: bool = False, lo: float = -1e18, hi: float = 1e18) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShapeError(f"{_where(member, field)}: expected a number, got {_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value) or not lo <= value <= hi:
        raise ShapeError(f"{_where(member, field)}: {value!r} is out of range ({lo:g}..{hi:g})")


def need(cond: bool, member: str, field: str, what: str, value=None) -> None:
    if not cond:
        raise ShapeError(f"{_where(member, field)}: expected {what}, got {_kind(value)}")


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({str(value)[:20]})"
    if isinstance(value, str):
        return f"text ({value[:30]!r})"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return type(value).__name__


def _index_section(index: dict, key: str) -> dict:
    """One section of ``index.json``: an object, or empty when absent."""
    value = index.get(key) or {}
    need(isinstance(value, dict), "index.json", key, "an object", value)
    return value


def _by_epoch(section: dict, name: str, check: Callable[[Any, str], None]) -> dict[int, dict]:
    """A section of ``index.json`` keyed by epoch (``kmsg``, ``net``), each record checked by ``check``."""
    out = {}
    for k, v in section.items():
        check(v, f"{name}.{k}")
        out[epoch_key(k, "index.json", name)] = dict(v)
    return out


def epoch_key(key, member: str, field: str) -> int:
    """An epoch as written in the index ("0", "1"): a small non-negative integer."""
    s = str(key)
    if not (s.isascii() and s.isdigit() and len(s) <= 3) or int(s) >= MAX_EPOCHS:
        raise ShapeError(f"{member}: {field}: epoch {s[:20]!r} is not an integer 0..{MAX_EPOCHS - 1}")
    return int(s)


def check_read_error(err, member: str, field: str) -> None:
    need(isinstance(err, dict), member, field, "a read-error object", err)
    need_str(err.get("kind", "io"), member, f"{field}.kind")
    need_int(err.get("errno"), member, f"{field}.errno", optional=True, lo=0, hi=4096)
    need_str(err.get("message", ""), member, f"{field}.message")


def check_meta(meta: dict) -> None:
    m = "meta.json"
    for key in ("host", "hostname", "kernel", "tool", "tool_version", "time", "format"):
        if key in meta:
            need_str(meta[key], m, key, optional=True)
    need_number(meta.get("time_epoch"), m, "time_epoch", optional=True, lo=0, hi=1e11)
    need_int(meta.get("format_version", 0), m, "format_version", lo=0, hi=1000)
    need_int(meta.get("epochs", 1), m, "epochs", optional=True, lo=0, hi=MAX_EPOCHS)
    if "environ_recorded" in meta:
        rec = meta["environ_recorded"]
        need(isinstance(rec, list) and all(isinstance(x, str) for x in rec), m, "environ_recorded",
             "a list of variable prefixes (text)", rec)


def check_command(rec, k: int) -> None:
    m = "commands.json"
    f = f"record {k}"
    need(isinstance(rec, dict), m, f, "an object", rec)
    argv = rec.get("argv")
    need(isinstance(argv, list) and all(isinstance(a, str) for a in argv), m, f"{f}.argv", "a list of text", argv)
    need_int(rec.get("epoch", 0), m, f"{f}.epoch", lo=0, hi=MAX_EPOCHS - 1)
    need_int(rec.get("rc"), m, f"{f}.rc", optional=True, lo=-1024, hi=1024)
    need_str(rec.get("stdout", ""), m, f"{f}.stdout")
    need_str(rec.get("stderr", ""), m, f"{f}.stderr")
    need_number(rec.get("duration_s", 0.0), m, f"{f}.duration_s", lo=0, hi=1e6)
    need(isinstance(rec.get("timed_out", False), bool), m, f"{f}.timed_out", "true or false", rec.get("timed_out"))
    need_str(rec.get("error"), m, f"{f}.error", optional=True)


_NVML_ARG = (str, int, float, bool, list)


def _nvml_record_fine(rec) -> bool:
    """The common, well-formed record, decided without building a message per field: a snapshot of
    a big node holds hundreds of thousands of them (372,741 at 256 GPUs, where the per-field checks
    took 4 s of a 10 s deadline). Anything unusual goes to the full check, which names the field."""
    if type(rec) is not dict:
        return False
    call = rec.get("call")
    if type(call) is not list or not call or type(call[0]) is not str:
        return False
    for a in call[1:]:
        if a is not None and not isinstance(a, _NVML_ARG):
            return False
    epoch = rec.get("epoch", 0)
    if type(epoch) is not int or not 0 <= epoch < MAX_EPOCHS:
        return False
    if "error" not in rec:
        return True
    code = rec.get("code")
    return (type(rec["error"]) is str and type(rec.get("message", "")) is str
            and (code is None or type(code) is int and -MAX_INT <= code <= MAX_INT))


def check_nvml(rec, k: int) -> None:
    if _nvml_record_fine(rec):
        return
    m = "nvml.json"
    f = f"record {k}"
    need(isinstance(rec, dict), m, f, "an object", rec)
    call = rec.get("call")
    need(isinstance(call, list) and bool(call) and isinstance(call[0], str), m, f"{f}.call",
         "a list starting with a function name", call)
    for a in call[1:]:
        # arguments are scalars or lists of them (field ids); only their repr() is used, as a key
        need(a is None or isinstance(a, (str, int, float, bool, list)), m, f"{f}.call", "scalar or list arguments", a)
    need_int(rec.get("epoch", 0), m, f"{f}.epoch", lo=0, hi=MAX_EPOCHS - 1)
    if "error" in rec:
        need_str(rec["error"], m, f"{f}.error")
        need_int(rec.get("code"), m, f"{f}.code", optional=True)
        need_str(rec.get("message", ""), m, f"{f}.message")
    # "ok" values are any JSON; the NVML probe checks each against the shape its call returns


def check_kmsg(rec, field: str) -> None:
    m = "index.json"
    need(isinstance(rec, dict), m, field, "an object", rec)
    if "error" in rec:
        check_read_error(rec["error"], m, f"{field}.error")
        return
    lines = rec.get("lines", [])
    need(isinstance(lines, list) and all(isinstance(x, str) for x in lines), m, f"{field}.lines",
         "a list of text", lines)


def check_net(rec, field: str) -> None:
    """What the netdev probe reads of psutil's facts: addrs {name: [{family, address, netmask}]},
    stats {name: {isup, speed_mbps, mtu, ...}}."""
    m = "index.json"
    need(isinstance(rec, dict), m, field, "an object", rec)
    if "error" in rec:
        need_str(rec["error"] if isinstance(rec["error"], str) else str(rec["error"]), m, f"{field}.error")
        return
    addrs = rec.get("addrs", {})
    need(isinstance(addrs, dict), m, f"{field}.addrs", "an object", addrs)
    for name, items in addrs.items():
        need(isinstance(items, list), m, f"{field}.addrs.{name}", "a list", items)
        for i, item in enumerate(items):
            need(isinstance(item, dict), m, f"{field}.addrs.{name}[{i}]", "an object", item)
            for key in ("family", "address", "netmask", "broadcast"):
                v = item.get(key)
                need(v is None or isinstance(v, (str, int)) and not isinstance(v, bool), m,
                     f"{field}.addrs.{name}[{i}].{key}", "text or a number", v)
    stats = rec.get("stats", {})
    need(isinstance(stats, dict), m, f"{field}.stats", "an object", stats)
    for name, st in stats.items():
        need(isinstance(st, dict), m, f"{field}.stats.{name}", "an object", st)
        for key, v in st.items():
            if key in ("isup", "up"):
                need(isinstance(v, bool) or v is None, m, f"{field}.stats.{name}.{key}", "true or false", v)
            elif key in ("speed_mbps", "mtu"):
                need_int(v, m, f"{field}.stats.{name}.{key}", optional=True, lo=-1, hi=10 ** 9)
            elif key in ("duplex",):
                need(v is None or isinstance(v, (str, int)), m, f"{field}.stats.{name}.{key}", "text or a number", v)


def check_statvfs(path, rec) -> None:
    m = "index.json"
    f = f"statvfs.{path}"
    need(isinstance(rec, dict), m, f, "an object", rec)
    if "error" in rec:
        check_read_error(rec["error"], m, f"{f}.error")
        return
    for key, v in rec.items():
        need_int(v, m, f"{f}.{key}", lo=0, hi=MAX_INT) if not isinstance(v, float) else \
            need_number(v, m, f"{f}.{key}", lo=0, hi=1e30)


# ---------------------------------------------------------------------------------------------
# Reading the tar in one pass
#
# One linear pass over a snapshot's tar bytes, for the archives ccdiag itself writes (kept in this
# module: the layer rules in tests/test_layers.py count ccdiag.host.snapshot as the host door).
#
# Why: ``tarfile`` spends ~100 us per member (it parses every header field through generic helpers,
# and a PAX long name costs it two headers and a regex pass). A node with 3,000 RDMA devices has
# ~300,000 members, so loading its snapshot took ~20 s before any probe ran. ccdiag writes only
# four kinds of member (regular file, directory, symlink, and the PAX "x" header carrying a long
# ``path``/``linkpath``); :func:`scan_tar` reads exactly those, with the same meaning ``tarfile`` gives
# them, in one pass over the bytes with no per-member re-scan.
#
# It never decides that an archive is bad. On anything it does not recognise with certainty (another
# member type, a bad or signed header checksum, a number field ``tarfile`` would parse differently,
# non-ASCII header text, a PAX record other than path/linkpath, data past the end, a first block of
# zeros) it returns None and the caller reads the archive with ``tarfile`` as before, so every damaged
# or foreign archive keeps exactly the refusal it had.

BLOCK = 512
_ZERO = bytes(BLOCK)
# name mode uid gid size mtime chksum type linkname magic version uname gname devmajor devminor prefix
_HEADER = struct.Struct("100s8s8s8s12s12s8s1s100s6s2s32s32s8s8s155s12x")
# what tarfile.nti reads as an octal number, narrowed to the plain form: blanks, octal digits, blanks
_OCTAL = re.compile(rb" *[0-7]* *\Z")
_CACHE_MAX = 65536


class _Unusual(Exception):
    """Something the fast pass does not handle; the caller falls back to ``tarfile``."""


class TarMember:
    """One member as the snapshot reader needs it: name, kind ("file", "dir", "sym"), link target,
    and the span of its data in the archive (files only)."""

    __slots__ = ("name", "kind", "linkname", "start", "size")

    def __init__(self, name: str, kind: str, linkname: str, start: int, size: int):
        self.name, self.kind, self.linkname, self.start, self.size = name, kind, linkname, start, size


def _number(field: bytes, cache: dict) -> int:
    value = cache.get(field)
    if value is None:
        text = field.split(b"\0", 1)[0]
        if not _OCTAL.match(text):
            raise _Unusual()
        text = text.strip(b" ")
        value = int(text, 8) if text else 0
        if len(cache) < _CACHE_MAX:
            cache[field] = value
    return value


def _checksum_ok(buf: bytes, field: bytes, stored: int) -> bool:
    """tarfile's unsigned header checksum (chksum field counted as blanks) equals ``stored``.

    The low half of Adler-32 is 1 + the byte sum mod 65521; a 256-byte half sums to at most 65,280,
    so two calls give the exact sum at C speed (a Python-level sum over 512 bytes costs 5 us).
    """
    total = (zlib.adler32(buf[:256]) & 0xFFFF) + (zlib.adler32(buf[256:]) & 0xFFFF) - 2
    return total - sum(field) + 256 == stored


def _text(field: bytes) -> str:
    if not field[0]:
        return ""
    try:
        return field.split(b"\0", 1)[0].decode("ascii")
    except UnicodeDecodeError:
        raise _Unusual() from None


def _pax(raw: bytes, start: int, size: int, block_end: int) -> dict[str, str]:
    """The path/linkpath records of a PAX extended header; anything else is unusual."""
    if raw[start + size:block_end].strip(b"\0") or b"hdrcharset=" in raw[start:block_end]:
        raise _Unusual()
    out: dict[str, str] = {}
    pos, end = start, start + size
    while pos < end:
        space = raw.find(b" ", pos, end)
        digits = raw[pos:space] if space > pos else b""
        if not (digits.isdigit() and digits.isascii()):
            raise _Unusual()
        rec_end = pos + int(digits)
        eq = raw.find(b"=", space + 1, rec_end)
        if rec_end <= space + 1 or rec_end > end or eq < 0 or raw[rec_end - 1:rec_end] != b"\n":
            raise _Unusual()
        key = raw[space + 1:eq]
        if key not in (b"path", b"linkpath"):
            raise _Unusual()
        try:
            out[key.decode()] = raw[eq + 1:rec_end - 1].decode("utf-8")
        except UnicodeDecodeError:
            raise _Unusual() from None
        pos = rec_end
    return out


def scan_tar(raw: bytes) -> tuple[list[TarMember], int] | None:
    """The members of the uncompressed tar ``raw`` and the offset of its end-of-archive block, or
    None when the archive holds anything this pass does not read exactly as ``tarfile`` would."""
    try:
        return _scan(raw)
    except _Unusual:
        return None


def _scan(raw: bytes) -> tuple[list[TarMember], int]:
    members: list[TarMember] = []
    cache: dict[bytes, int] = {}
    sizes: dict[bytes, int] = {}
    devices: set[bytes] = set()
    total = len(raw)
    pos = 0
    pax: dict[str, str] | None = None
    unpack = _HEADER.unpack_from
    while True:
        if pos + BLOCK > total:
            raise _Unusual()
        buf = raw[pos:pos + BLOCK]
        if buf == _ZERO:
            if pos == 0 or pax is not None:
                raise _Unusual()
            return members, pos
        (name_b, mode, uid, gid, size_b, mtime, chk, typ, link_b, _magic, _version, _uname, _gname,
         major, minor, prefix_b) = unpack(buf)
        if not _checksum_ok(buf, chk, _number(chk, cache)):
            raise _Unusual()
        # the five number fields before the checksum, and the two device numbers, are validated
        # once per distinct byte string (a snapshot repeats mode/uid/gid/mtime in every header)
        numbers = buf[100:148]
        size = sizes.get(numbers)
        if size is None:
            for f in (mode, uid, gid, mtime):
                _number(f, cache)
            size = _number(size_b, cache)
            if len(sizes) < _CACHE_MAX:
                sizes[numbers] = size
        if major + minor not in devices:
            _number(major, cache)
            _number(minor, cache)
            devices.add(major + minor)
        data = pos + BLOCK
        if typ == b"x":
            if pax is not None:
                raise _Unusual()
            block_end = data + -(-size // BLOCK) * BLOCK
            if block_end > total:
                raise _Unusual()
            pax = _pax(raw, data, size, block_end)
            pos = block_end
            continue
        name = _text(name_b)
        if typ == b"0":
            kind = "file"
        elif typ == b"5":
            kind = "dir"
            name = name.rstrip("/")
        elif typ == b"2":
            kind = "sym"
        else:
            raise _Unusual()
        prefix = _text(prefix_b)
        if prefix:
            name = prefix + "/" + name
        linkname = _text(link_b)
        if pax is not None:
            if "path" in pax:
                name = pax["path"].rstrip("/")
            linkname = pax.get("linkpath", linkname)
            pax = None
        if kind == "file":
            if data + size > total:
                raise _Unusual()
            members.append(TarMember(name, kind, linkname, data, size))
            pos = data + -(-size // BLOCK) * BLOCK
        else:
            # tarfile skips no data after a directory or symlink header, whatever its size field says
            members.append(TarMember(name, kind, linkname, data, 0))
            pos = data
