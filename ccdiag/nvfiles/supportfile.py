"""Opening a support file users hand over: a plain or gzip-compressed text, read as lines, bounded.

An ``nvidia-bug-report.log.gz`` can be hundreds of megabytes once inflated (kernel logs, base64
blobs of ``nvidia-debugdump`` and ``acpidump``), arrives truncated (an upload cut short, a script
killed at a hang) or is not text at all (a ``.run`` installer renamed, a zip). So the file is
streamed, never held whole: lines come one at a time from a bounded buffer, a gzip stream that ends
early gives the lines read so far and a note saying where it stopped, and a deadline stops the
reading with the same kind of note, so a caller always gets what could be read in time (a partial
verdict) or one clear error — never a hang, never a traceback.

Why not :func:`ccdiag.core.userfiles.read_user_bytes`: it reads the whole file into memory and its
limit (256 MB) is below what a real report may inflate to.
"""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass, field
from typing import IO, Iterator

from ccdiag.core.errors import UserInputError
from ccdiag.core.userfiles import open_regular_file

#: the most a support file may inflate to before reading stops (with a note): far above any real
#: report, bounded so a decompression bomb cannot run for minutes
MAX_TEXT_BYTES = 2 << 30
#: a line longer than this is cut (a base64 blob without newlines, a garbled stretch)
MAX_LINE_CHARS = 1 << 16
#: how much of the start is looked at to refuse a binary file
SNIFF_BYTES = 64 << 10
#: bytes read per step; the deadline is looked at between steps
CHUNK_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


class _Corrupt(Exception):
    """A gzip stream that cannot be inflated further."""


class SupportFileError(UserInputError):
    """A support file that cannot be read as text at all (exit 2), in one line naming the file."""


@dataclass
class Reading:
    """What reading a file came to: how far it got and why it stopped early, if it did.

    ``notes`` are sentences for the report ("the gzip stream ends early ..."); ``complete`` is False
    whenever the text read is not the whole file."""

    name: str
    compressed: bool = False
    bytes_read: int = 0
    lines_read: int = 0
    complete: bool = True
    notes: list[str] = field(default_factory=list)

    def stop(self, note: str) -> None:
        self.complete = False
        self.notes.append(note)


def _open_raw(path: str, what: str) -> IO[bytes]:
    fd, _ = open_regular_file(path, what, what, SupportFileError)
    return os.fdopen(fd, "rb")


def looks_binary(head: bytes) -> bool:
    """True when ``head`` is not text: NUL bytes, or mostly bytes no text encoding uses."""
    if not head:
        return False
    if b"\x00" in head[:SNIFF_BYTES]:
        return True
    sample = head[:SNIFF_BYTES]
    control = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13, 27))
    return control > len(sample) // 20


class SupportFile:
    """A support file as lines (``\\n`` and trailing ``\\r`` removed), read once, front to back.

    ``deadline`` is an absolute ``time.monotonic()``; reading stops at it (``reading.complete`` is
    then False and a note says how far it got). ``max_bytes`` bounds the inflated text the same way."""

    def __init__(self, path: str, what: str = "a support file", deadline: float | None = None,
                 max_bytes: int = MAX_TEXT_BYTES):
        self.path = path
        self.what = what
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.reading = Reading(os.path.basename(path))
        self._raw = _open_raw(path, what)
        head = self._raw.read(2)
        self._raw.seek(0)
        self.reading.compressed = head == _GZIP_MAGIC

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> "SupportFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _raw_chunks(self) -> Iterator[bytes]:
        """The file's bytes, inflated when it is gzip: member after member (``cat a.gz b.gz``), each
        inflated piece handed on at once, so a stream cut short still gives all it held."""
        while True:
            try:
                chunk = self._raw.read(CHUNK_BYTES)
            except OSError as exc:
                raise SupportFileError(f"{self.path}: cannot read {self.what}: {exc.strerror or exc}") from None
            if not self.reading.compressed:
                if not chunk:
                    return
                yield chunk
                continue
            if not hasattr(self, "_inflater"):
                self._inflater = zlib.decompressobj(wbits=31)
            if not chunk:
                if not self._inflater.eof and self._seen_gzip:
                    raise EOFError
                return
            data = chunk
            while data:
                try:
                    out = self._inflater.decompress(data, CHUNK_BYTES * 4)
                except zlib.error as exc:
                    raise _Corrupt(str(exc)) from None
                self._seen_gzip = True
                if out:
                    yield out
                data = self._inflater.unconsumed_tail
                if self._inflater.eof:
                    rest = self._inflater.unused_data
                    self._inflater = zlib.decompressobj(wbits=31)
                    self._seen_gzip = False
                    data = rest.lstrip(b"\x00")  # padding after the last member is allowed
                    if data and data[:2] != _GZIP_MAGIC:
                        raise _Corrupt("trailing bytes after the gzip stream")

    _seen_gzip = False

    def _chunks(self) -> Iterator[bytes]:
        r = self.reading
        source = self._raw_chunks()
        while True:
            # the first chunk is always read (bounded work): a file whose start was read gets a partial verdict
            if r.bytes_read and self.deadline is not None and time.monotonic() > self.deadline:
                r.stop(f"reading stopped at the deadline after {r.bytes_read / 1e6:.1f} MB "
                       f"({r.lines_read} lines); what follows in the file was not read")
                return
            if r.bytes_read >= self.max_bytes:
                r.stop(f"reading stopped after {self.max_bytes / 1e6:.0f} MB, the most ccdiag reads of one file")
                return
            try:
                chunk = next(source)
            except StopIteration:
                return
            except EOFError:
                if r.bytes_read == 0:
                    raise SupportFileError(f"{self.path}: a gzip file with nothing readable in it (cut short)") from None
                r.stop(f"the gzip stream ends early (a truncated file): read the first {r.bytes_read / 1e6:.1f} MB")
                return
            except _Corrupt as exc:
                if r.bytes_read == 0:
                    raise SupportFileError(f"{self.path}: not a readable gzip file ({exc})") from None
                r.stop(f"the gzip stream is corrupt after {r.bytes_read / 1e6:.1f} MB ({exc}); what follows was not read")
                return
            if r.bytes_read == 0 and looks_binary(chunk):
                raise SupportFileError(f"{self.path}: not text (binary content at the start), expected {self.what}")
            if r.bytes_read + len(chunk) > self.max_bytes:
                chunk = chunk[: self.max_bytes - r.bytes_read]
            r.bytes_read += len(chunk)
            yield chunk

    def lines(self) -> Iterator[str]:
        """Every line, decoded as UTF-8 with bad bytes replaced; long lines cut to :data:`MAX_LINE_CHARS`.
        Whole runs of complete lines are decoded and split at once (the per-line work is what bounds
        the speed on a report of hundreds of megabytes)."""
        r = self.reading
        pending = b""
        for chunk in self._chunks():
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                if len(pending) > MAX_LINE_CHARS * 4:
                    # a line that never ends: keep its head, drop the rest of it as it streams by
                    r.lines_read += 1
                    yield _decode(pending[:MAX_LINE_CHARS])
                    pending = b""
                continue
            pending = data[cut + 1:]
            text = data[:cut].decode("utf-8", "replace")
            if "\r" in text:
                text = text.replace("\r\n", "\n")
            parts = text.split("\n")
            r.lines_read += len(parts)
            for line in parts:
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS]
                yield line
        if pending:
            r.lines_read += 1
            yield _decode(pending)


def _decode(raw: bytes) -> str:
    if len(raw) > MAX_LINE_CHARS:
        raw = raw[:MAX_LINE_CHARS]
    text = raw.decode("utf-8", "replace")
    return text[:-1] if text.endswith("\r") else text


def read_text(path: str, what: str, deadline: float | None = None, max_bytes: int = 256 << 20) -> tuple[str, Reading]:
    """The whole (small) file as one string, and how the reading went: for single outputs
    (``nvidia-smi -q``, ``dcgmi diag``) that are parsed whole."""
    with SupportFile(path, what, deadline, max_bytes) as f:
        text = "\n".join(f.lines())
        return text, f.reading
