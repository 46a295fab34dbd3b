"""A tiny reader of ttar archives (the plain-text tree format of prometheus/procfs test fixtures)
into a :class:`ccdiag.host.snapshot.SnapshotData`, so real captured sysfs trees replay through the door.

Format: records separated by lines starting with ``# ttar``; a record is ``Directory: <path>``,
or ``Path: <path>`` followed by ``Lines: <n>`` and n content lines (the last one ending in ``EOF``
when the file has no trailing newline; ``NULLBYTE`` stands for a NUL byte), or by
``SymlinkTo: <target>``; then ``Mode: <octal>``. A file whose mode has no read bit is loaded as a
permission error, as reading it would give. Leading ``#`` comment lines (the corpus header) are
skipped.
"""

from __future__ import annotations

import errno
import pathlib

from ccdiag.host.snapshot import SnapshotData


def load_ttar(source: str | pathlib.Path, prefix: str = "/sys", snap: SnapshotData | None = None) -> SnapshotData:
    """Load the archive at ``source`` with every path placed under ``prefix`` ("class/infiniband"
    with prefix "/sys" becomes "/sys/class/infiniband")."""
    text = pathlib.Path(source).read_text(encoding="utf-8")
    return parse_ttar(text, prefix, snap)


def parse_ttar(text: str, prefix: str = "/sys", snap: SnapshotData | None = None) -> SnapshotData:
    snap = snap if snap is not None else SnapshotData()
    lines = text.split("\n")
    i = 0
    pending: tuple[str, str, object] | None = None  # (kind, path, payload)

    def place(path: str) -> str:
        return prefix.rstrip("/") + "/" + path.strip("/")

    def flush(mode: int | None) -> None:
        nonlocal pending
        if pending is None:
            return
        kind, path, payload = pending
        if kind == "dir":
            snap.put_dir(path)
        elif kind == "link":
            snap.put_link(path, str(payload))
        elif mode is not None and not mode & 0o444:
            snap.put_error(path, "permission", errno.EACCES, "Permission denied")
        else:
            snap.put_file(path, payload)  # type: ignore[arg-type]
        pending = None

    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("Directory: "):
            flush(None)
            pending = ("dir", place(line[len("Directory: "):]), None)
        elif line.startswith("Path: "):
            flush(None)
            path = place(line[len("Path: "):])
            nxt = lines[i] if i < len(lines) else ""
            if nxt.startswith("SymlinkTo: "):
                pending = ("link", path, nxt[len("SymlinkTo: "):])
                i += 1
            elif nxt.startswith("Lines: "):
                count = int(nxt[len("Lines: "):])
                i += 1
                body = lines[i:i + count]
                i += count
                data = "\n".join(body)
                if data.endswith("EOF"):
                    data = data[: -len("EOF")]
                elif count:
                    data += "\n"
                pending = ("file", path, data.replace("NULLBYTE", "\0").encode("utf-8"))
            else:
                raise ValueError(f"ttar: record for {path} has neither Lines: nor SymlinkTo:")
        elif line.startswith("Mode: "):
            flush(int(line[len("Mode: "):], 8))
        elif line.startswith("#") or not line.strip():
            continue
        else:
            raise ValueError(f"ttar: unexpected line {i}: {line[:60]!r}")
    flush(None)
    return snap


def extract_ttar(source: str | pathlib.Path, dest: str | pathlib.Path, prefix: str = "/sys",
                 skip: tuple[str, ...] = ()) -> None:
    """Write the archive at ``source`` as a real tree under ``dest`` (``dest/sys/...``), symlinks
    included, so ``--root dest`` reads it as a copied machine; paths starting with one of ``skip``
    (host paths, e.g. ``/sys/class/net/eth0``) are left out."""
    import os

    snap = load_ttar(source, prefix)
    root = pathlib.Path(dest)

    def keep(path: str) -> bool:
        return not any(path == s or path.startswith(s.rstrip("/") + "/") for s in skip)

    for d in sorted(snap.dirs):
        if keep(d):
            (root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path, data in snap.files.get(0, {}).items():
        if keep(path) and isinstance(data, bytes):
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    for path, link in snap.links.items():
        if keep(path):
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link, target)
