"""Reading the files users hand to ccdiag: bounded, and never a wait on something that is not a file.

A FIFO given to ``--replay`` or ``--policy`` would block the read forever, ``/dev/zero`` would grow
memory without end, and a directory gives a confusing error. Every file named on the command line
or in a config is opened without blocking, checked to be a regular file, and read up to a bound;
beyond it the read is refused with the limit named.
"""

from __future__ import annotations

import os
import stat

from ccdiag.core.errors import UserInputError

#: the largest input ccdiag reads from one user-named file (a snapshot of a large node is a few MB)
DEFAULT_MAX_BYTES = 256 << 20


class UserFileError(UserInputError, OSError):
    """A user-named file that cannot be read as one; ``str()`` says what and why in one line."""


def open_regular_file(path: str, what: str, expected: str,
                      error: type[Exception] = UserFileError) -> tuple[int, os.stat_result]:
    """A blocking descriptor on ``path`` and its stat, refused with ``error`` in one line unless it
    is a regular file: it is opened without blocking, so a FIFO named by mistake is refused instead
    of waiting for a writer forever. ``expected`` says what the file should have been."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{path}: is a directory, expected {expected}")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: not a regular file (a pipe or device), expected {expected}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_user_bytes(path: str, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    fd, st = open_regular_file(path, what, f"a {what} file")
    try:
        if st.st_size > max_bytes:
            raise UserFileError(f"{path}: {st.st_size} bytes is more than a {what} may be ({max_bytes} bytes)")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # the file grew while read
                raise UserFileError(f"{path}: more than {max_bytes} bytes, the most a {what} may be")
        return b"".join(chunks)
    except UserFileError:
        raise
    except OSError as exc:
        raise UserFileError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_user_text(path: str, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    return read_user_bytes(path, what, max_bytes).decode("utf-8", "replace")
