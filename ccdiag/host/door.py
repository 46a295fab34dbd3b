"""The host door: the only code in ccdiag that touches the machine.

Probes never call ``open``, ``subprocess`` or ``pynvml`` themselves; they ask a :class:`Host`.
Three faces share one interface:

* :class:`LiveHost` reads a real machine (files under ``root``, commands, NVML, kernel log);
* :class:`RecordingHost` is a live host that also writes everything it read into a
  :class:`~ccdiag.host.snapshot.SnapshotData`;
* :class:`ReplayHost` answers the same questions from a snapshot, on any machine.

So tests, the README demo, the daemon and support tickets all run the same probe code.

Paths are absolute host paths (``/sys/class/net``). Symlinks are resolved component by component
with ``root`` acting as ``/`` (like a chroot), identically live and in replay, which is what lets a
snapshot carry the sysfs subset *with its symlinks* and still answer reads made through them.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import platform
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from ccdiag.host import inflight, procgroups
from ccdiag.host.nvmlcall import DRIVER_MISSING, NOT_RECORDED, NvmlCallError, NvmlFacade
from ccdiag.host.snapshot import SnapshotData, SnapshotError, base_meta, gc_paused

#: environment variables a snapshot keeps (they steer NCCL and CUDA, and libfabric under NCCL's EFA
#: plugin, whose ``FI_*`` settings and ``RDMAV_FORK_SAFE`` AWS requires; nothing else is recorded)
RECORDED_ENV_PREFIXES = ("NCCL_", "CUDA_", "NVIDIA_", "UCX_", "OMPI_MCA_", "GPU_DEVICE_ORDINAL", "FI_",
                         "RDMAV_FORK_SAFE")
#: what snapshots recorded before ``meta["environ_recorded"]`` said it (no libfabric variables)
LEGACY_ENV_PREFIXES = ("NCCL_", "CUDA_", "NVIDIA_", "UCX_", "OMPI_MCA_", "GPU_DEVICE_ORDINAL")


def environ_recorded(meta: dict) -> tuple[str, ...]:
    """The variable prefixes whose absence from a door's :meth:`Host.environ` means "not set": the
    ``environ_recorded`` of its metadata, else (a snapshot from before it was recorded) the legacy set.
    Empty under ``--root``, whose process environment is not the tree's."""
    got = meta.get("environ_recorded")
    if isinstance(got, list) and all(isinstance(x, str) for x in got):
        return tuple(got)
    return LEGACY_ENV_PREFIXES

#: default bound on one file read; sysfs attributes are tiny, this protects against /dev/zero-likes
MAX_READ_BYTES = 4 << 20


class HostReadError(Exception):
    """A file, directory or link that could not be read.

    ``kind``: ``missing`` (ENOENT, or absent from a snapshot), ``permission`` (EACCES/EPERM),
    ``invalid`` (EINVAL, e.g. a hw_counter the firmware refuses; EISDIR), ``io`` (EIO and others),
    ``loop`` (too many symlinks), ``not_recorded`` (a replayed record that holds only part of the
    node, a bug report, does not say: unknown, never absent).
    """

    def __init__(self, path: str, kind: str, errno_: int | None, message: str):
        self.path = path
        self.kind = kind
        self.errno = errno_
        self.message = message
        super().__init__(f"{path}: {message}")


#: the kind of a read a partial record (a node rebuilt from a bug report) cannot answer
NOT_RECORDED_KIND = "not_recorded"
#: snapshot metadata naming what a partial record was built from ("the bug report nvidia-bug-report.log.gz");
#: present, the replay answers what the record lacks as not recorded instead of absent
PARTIAL_RECORD_META = "partial_record"
#: snapshot metadata: probe -> why the record holds nothing it reads
NOT_RECORDED_META = "not_recorded"


def _kind_of_errno(code: int | None) -> str:
    if code == errno.ENOENT or code == errno.ENOTDIR:
        return "missing"
    if code in (errno.EACCES, errno.EPERM):
        return "permission"
    if code in (errno.EINVAL, errno.EISDIR, errno.EOPNOTSUPP):
        return "invalid"
    return "io"


def _error_from_oserror(path: str, exc: OSError) -> HostReadError:
    return HostReadError(path, _kind_of_errno(exc.errno), exc.errno, exc.strerror or str(exc))


#: ``CommandResult.error`` of a command asked for under a root: a copied tree is read from its files
#: only, so its probes treat the command as absent rather than failed
NOT_RUN_UNDER_ROOT = "not run under --root"


@dataclass(frozen=True)
class CommandResult:
    """What one command did. ``rc`` is None when it never ran or was killed at its deadline."""

    argv: tuple[str, ...]
    rc: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    error: str | None = None  # "not found", "permission denied", "not recorded in snapshot", ...

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and self.error is None

    def describe(self) -> str:
        """One line for findings and logs: what ran and how it ended."""
        cmd = " ".join(self.argv)
        if self.error:
            return f"`{cmd}`: {self.error}"
        if self.timed_out:
            return f"`{cmd}`: killed after {self.duration_s:.1f}s without finishing"
        return f"`{cmd}`: exit {self.rc} in {self.duration_s:.2f}s"

    def to_record(self) -> dict:
        return {"argv": list(self.argv), "rc": self.rc, "stdout": self.stdout, "stderr": self.stderr,
                "duration_s": round(self.duration_s, 4), "timed_out": self.timed_out, "error": self.error}

    @classmethod
    def from_record(cls, rec: dict) -> "CommandResult":
        return cls(tuple(rec["argv"]), rec.get("rc"), rec.get("stdout", ""), rec.get("stderr", ""),
                   float(rec.get("duration_s", 0.0)), bool(rec.get("timed_out", False)), rec.get("error"))


def normpath(path: str) -> str:
    """Absolute, normalised host path (no trailing slash, no '.' parts)."""
    if path[:1] == "/" and "//" not in path and "/." not in path and path[-1:] != "/" or path == "/":
        return path  # already normal (the common case: paths the probes build)
    if not path.startswith("/"):
        path = "/" + path
    parts = [p for p in path.split("/") if p and p != "."]
    return "/" + "/".join(parts)


def resolve_path(path: str, lookup_link: Callable[[str], str | None], max_hops: int = 40) -> str:
    """Resolve every symlink in ``path`` with ``/`` as the root (``..`` never climbs above it).

    ``lookup_link(p)`` returns the link target of ``p`` or None when ``p`` is not a symlink.
    """
    pending = [p for p in path.split("/") if p and p != "."]
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = "/" + "/".join(resolved + [part])
        target = lookup_link(candidate)
        if target is None:
            resolved.append(part)
            continue
        hops += 1
        if hops > max_hops:
            raise HostReadError(path, "loop", errno.ELOOP, "too many levels of symbolic links")
        if target.startswith("/"):
            resolved = []
        pending = [p for p in target.split("/") if p and p != "."] + pending
    return "/" + "/".join(resolved)


@runtime_checkable
class Host(Protocol):
    """The host door as probes, commands and the daemon see it: files under a root, commands with a
    deadline, NVML, the kernel log, interface facts, metadata, epochs. :class:`LiveHost`,
    :class:`RecordingHost` and :class:`ReplayHost` implement it; code takes a ``Host`` and never
    asks which one it got."""

    live: bool
    epoch: int
    #: absolute ``time.monotonic()`` bound on every command started from now on (None: per-call only)
    deadline: float | None

    def realpath(self, path: str) -> str: ...
    def read_bytes(self, path: str, max_bytes: int = ...) -> bytes: ...
    def read_text(self, path: str, max_bytes: int = ...) -> str: ...
    def read_attr(self, path: str) -> str: ...
    def read_link(self, path: str) -> str: ...
    def list_dir(self, path: str) -> list[str]: ...
    def exists(self, path: str) -> bool: ...
    def is_dir(self, path: str) -> bool: ...
    def run(self, argv: Sequence[str], timeout: float = ...) -> "CommandResult": ...
    def nvml(self, fn: str, *args: Any) -> Any: ...
    def read_kmsg(self) -> list[str]: ...
    def net_interfaces(self) -> dict: ...
    def statvfs(self, path: str) -> dict: ...
    def environ(self) -> dict[str, str]: ...
    def cloud_metadata(self, provider: str) -> str: ...
    def meta(self) -> dict: ...
    def now(self) -> float: ...
    def next_epoch(self, seconds: float) -> None: ...
    def close(self) -> None: ...


class BaseHost:
    """What the three faces of the door share. Subclasses supply the primitives marked ``_``."""

    live: bool = False

    def __init__(self) -> None:
        self.epoch = 0
        self.deadline: float | None = None

    # -- primitives (subclasses) ---------------------------------------------------------
    def _lookup_link(self, path: str) -> str | None:
        raise NotImplementedError

    def _read_real(self, real: str, max_bytes: int) -> bytes:
        raise NotImplementedError

    def _list_real(self, real: str) -> list[str]:
        raise NotImplementedError

    def _kind_real(self, real: str) -> str | None:
        """'file', 'dir' or None (absent)."""
        raise NotImplementedError

    # -- files ------------------------------------------------------------------------------
    def realpath(self, path: str) -> str:
        return resolve_path(normpath(path), self._lookup_link)

    def read_bytes(self, path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        return self._read_real(self.realpath(path), max_bytes)

    def read_text(self, path: str, max_bytes: int = MAX_READ_BYTES) -> str:
        return self.read_bytes(path, max_bytes).decode("utf-8", "replace")

    def read_attr(self, path: str) -> str:
        """A sysfs attribute: text with the trailing newline (and surrounding blanks) removed."""
        return self.read_text(path, 65536).strip()

    def read_link(self, path: str) -> str:
        """The target of the symlink ``path`` itself (its parent directories resolved)."""
        p = normpath(path)
        parent, _, name = p.rpartition("/")
        real = resolve_path(parent or "/", self._lookup_link).rstrip("/") + "/" + name
        target = self._lookup_link(real)
        if target is None:
            kind = self._kind_real(real)
            if kind is None:
                raise HostReadError(path, "missing", errno.ENOENT, "no such file or directory")
            raise HostReadError(path, "invalid", errno.EINVAL, "not a symbolic link")
        return target

    def list_dir(self, path: str) -> list[str]:
        return sorted(self._list_real(self.realpath(path)))

    def exists(self, path: str) -> bool:
        try:
            return self._kind_real(self.realpath(path)) is not None
        except HostReadError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return self._kind_real(self.realpath(path)) == "dir"
        except HostReadError:
            return False

    # -- the rest of the door (subclasses) --------------------------------------------------
    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CommandResult:
        raise NotImplementedError

    def nvml(self, fn: str, *args: Any) -> Any:
        raise NotImplementedError

    def read_kmsg(self) -> list[str]:
        raise NotImplementedError

    def net_interfaces(self) -> dict:
        raise NotImplementedError

    def statvfs(self, path: str) -> dict:
        raise NotImplementedError

    def environ(self) -> dict[str, str]:
        raise NotImplementedError

    def cloud_metadata(self, provider: str) -> str:
        """The instance type as the cloud's instance metadata service gives it (:mod:`ccdiag.host.imds`);
        raises :class:`HostReadError`. A door without the service says so."""
        raise HostReadError(f"imds:{provider}", "missing", None, "this door has no instance metadata service")

    def unrecorded(self, probe: str) -> str | None:
        """Why this door holds nothing of what probe ``probe`` reads (a replayed partial record),
        or None: the probe's own finding stands."""
        return None

    def meta(self) -> dict:
        raise NotImplementedError

    def now(self) -> float:
        """Wall-clock time of the observation (the recording time when replaying)."""
        return time.time()

    def next_epoch(self, seconds: float) -> None:
        """Wait a sampling window (live) and start the next epoch of reads."""
        self.epoch += 1

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
class LiveHost(BaseHost):
    """The real machine. ``root`` lets tests and support engineers point it at a copied tree."""

    live = True

    def __init__(self, root: str = "/", nvml: NvmlFacade | None = None, nvml_binding: Any = None,
                 nvml_call_timeout: float = 3.0):
        super().__init__()
        self.root = os.path.abspath(root)
        self._procs: set[subprocess.Popen] = set()
        self._procs_lock = threading.Lock()
        if nvml is None and (self.root == "/" or nvml_binding is not None):
            nvml = NvmlFacade(binding=nvml_binding, call_timeout=nvml_call_timeout)
        self._nvml = nvml

    def _fs(self, path: str) -> str:
        return path if self.root == "/" else os.path.join(self.root, path.lstrip("/"))

    def _lookup_link(self, path: str) -> str | None:
        try:
            return os.readlink(self._fs(path))
        except OSError:
            return None

    def _read_real(self, real: str, max_bytes: int) -> bytes:
        inflight.enter(f"read of {real}")
        try:
            return self._read_file(real, max_bytes)
        finally:
            inflight.leave()

    def _read_file(self, real: str, max_bytes: int) -> bytes:
        try:
            fd = os.open(self._fs(real), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise _error_from_oserror(real, exc) from None
        try:
            chunks = []
            remaining = max_bytes
            while remaining > 0:
                chunk = os.read(fd, min(remaining, 65536))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
            return b"".join(chunks)
        except BlockingIOError:
            return b"".join(chunks)
        except OSError as exc:
            raise _error_from_oserror(real, exc) from None
        finally:
            os.close(fd)

    def _list_real(self, real: str) -> list[str]:
        inflight.enter(f"read of {real}")
        try:
            return os.listdir(self._fs(real))
        except OSError as exc:
            raise _error_from_oserror(real, exc) from None
        finally:
            inflight.leave()

    def _kind_real(self, real: str) -> str | None:
        try:
            st = os.stat(self._fs(real))
        except OSError:
            return None
        return "dir" if stat.S_ISDIR(st.st_mode) else "file"

    # commands --------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CommandResult:
        """Run ``argv`` with a hard deadline: SIGKILL to its whole process group, then a bounded
        wait, so a child stuck in the kernel (``nvidia-smi`` on a wedged GPU) cannot hold us.

        Under a root nothing runs: this machine's ``nvidia-smi``, ``dmesg`` or ``systemctl`` describe
        this machine, not the copied tree, so a tree is read from its files alone (as node_exporter's
        root options only prefix file reads), like NVML and the environment already are."""
        argv = tuple(str(a) for a in argv)
        if self.root != "/":
            return CommandResult(argv, None, "", "", 0.0, False, NOT_RUN_UNDER_ROOT)
        inflight.enter("command `" + " ".join(argv) + "`")
        try:
            return self._run_command(argv, timeout)
        finally:
            inflight.leave()

    def _run_command(self, argv: tuple[str, ...], timeout: float) -> CommandResult:
        env = dict(os.environ, LC_ALL="C", LANG="C")
        start = time.monotonic()
        if self.deadline is not None:
            remaining = self.deadline - start
            if remaining <= 0:
                return CommandResult(argv, None, "", "", 0.0, True, "not started: the run's deadline had passed")
            timeout = min(timeout, remaining)
        try:
            with procgroups.starting():
                # a session of its own (a deadline kills the whole tree), dying with ccdiag however
                # ccdiag ends (SIGKILL included: procgroups.die_with_parent)
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True, env=env,
                                        preexec_fn=procgroups.die_with_parent())
                procgroups.register(proc.pid)
        except FileNotFoundError:
            return CommandResult(argv, None, "", "", 0.0, False, "not found")
        except PermissionError:
            return CommandResult(argv, None, "", "", 0.0, False, "permission denied")
        except OSError as exc:
            return CommandResult(argv, None, "", "", 0.0, False, f"could not start: {exc.strerror or exc}")
        with self._procs_lock:
            self._procs.add(proc)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=max(timeout, 0.01))
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                out, err = proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                # unkillable (D state) or a grandchild holds the pipes: abandon it
                for pipe in (proc.stdout, proc.stderr):
                    try:
                        if pipe is not None:
                            pipe.close()
                    except Exception:
                        pass
                out, err = b"", b""
        if proc.returncode is not None:
            procgroups.forget(proc.pid)
            with self._procs_lock:
                self._procs.discard(proc)
        duration = time.monotonic() - start
        rc = None if timed_out else proc.returncode
        return CommandResult(argv, rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                             duration, timed_out, None)

    # NVML ------------------------------------------------------------------------------------
    def nvml(self, fn: str, *args: Any) -> Any:
        if self._nvml is None:
            raise NvmlCallError(fn, args, DRIVER_MISSING, None, f"NVML is not used for a tree under {self.root}")
        return self._nvml.call(fn, *args)

    def nvml_caller(self) -> Callable[..., Any]:
        """What :meth:`nvml` calls, for a caller making many calls: the facade's own ``call``
        where nothing is added on top of it (a recording host records each call, so it keeps its
        own :meth:`nvml`)."""
        if self._nvml is not None and type(self).nvml is LiveHost.nvml:
            return self._nvml.call
        return self.nvml

    def nvml_prefetch(self, groups: Sequence[Sequence[tuple[str, tuple]]], **how: Any) -> None:
        """Make these NVML calls now, in one hand-off to the facade's worker, for the calls that
        follow to be answered at once (:meth:`ccdiag.host.nvmlcall.NvmlFacade.prefetch`); a
        recording still records each call as it is asked."""
        if self._nvml is not None:
            self._nvml.prefetch(groups, **how)

    # kernel log ---------------------------------------------------------------------------
    def read_kmsg(self, max_records: int = 200000, max_seconds: float = 3.0) -> list[str]:
        """Records of ``/dev/kmsg`` (one per line), read without blocking."""
        inflight.enter("read of /dev/kmsg")
        try:
            return self._read_kmsg(max_records, max_seconds)
        finally:
            inflight.leave()

    def _read_kmsg(self, max_records: int, max_seconds: float) -> list[str]:
        path = self._fs("/dev/kmsg")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise _error_from_oserror("/dev/kmsg", exc) from None
        lines: list[str] = []
        deadline = time.monotonic() + max_seconds
        try:
            while len(lines) < max_records and time.monotonic() < deadline:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except BrokenPipeError:
                    continue  # records were overwritten while reading: go on with the next
                except OSError as exc:
                    if exc.errno == errno.EINVAL:  # a record larger than the buffer
                        continue
                    raise _error_from_oserror("/dev/kmsg", exc) from None
                if not chunk:
                    break
                lines.extend(chunk.decode("utf-8", "replace").splitlines())
        finally:
            os.close(fd)
        return lines

    # interface facts and metadata: the machine's own when live, the tree's under a root ---------
    def net_interfaces(self) -> dict:
        """Addresses (``addrs``) and kernel link state (``stats``) per interface. Live: psutil's view
        of this machine. Under a root: only what the tree holds (IPv6 addresses from
        ``/proc/net/if_inet6``; IPv4 addresses live in netlink, not in files, so a tree has none),
        never this machine's interfaces."""
        if self.root != "/":
            from ccdiag.host.netfacts import tree_net_facts

            return tree_net_facts(self._tree_text)
        import psutil

        fam = {socket.AF_INET: "inet", socket.AF_INET6: "inet6", getattr(psutil, "AF_LINK", -1): "link"}
        addrs = {}
        for name, items in psutil.net_if_addrs().items():
            addrs[name] = [{"family": fam.get(a.family, str(int(a.family))), "address": a.address,
                            "netmask": a.netmask, "broadcast": a.broadcast} for a in items]
        stats = {}
        for name, st in psutil.net_if_stats().items():
            stats[name] = {"isup": st.isup, "duplex": int(st.duplex), "speed_mbps": st.speed, "mtu": st.mtu,
                           "flags": getattr(st, "flags", None)}
        return {"addrs": addrs, "stats": stats}

    def statvfs(self, path: str) -> dict:
        try:
            st = os.statvfs(self._fs(path))
        except OSError as exc:
            raise _error_from_oserror(path, exc) from None
        return {"total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}

    def environ(self) -> dict[str, str]:
        """The NCCL/CUDA settings of this process; none under a root, whose environment is not the
        tree's (judge a tree's settings with ``--env-file``)."""
        if self.root != "/":
            return {}
        return {k: v for k, v in os.environ.items() if k.startswith(RECORDED_ENV_PREFIXES)}

    def cloud_metadata(self, provider: str) -> str:
        """One bounded read of the provider's instance metadata service (:func:`ccdiag.host.imds.fetch`:
        link-local, at most about a second, once per process); never under a root, whose machine is
        not this one."""
        from ccdiag.host import imds

        where = f"imds:{provider}"
        if self.root != "/":
            raise HostReadError(where, "missing", None, "not asked under --root: a copied tree has no metadata service")
        try:
            return imds.fetch(provider)
        except imds.ImdsError as exc:
            raise HostReadError(where, exc.kind, None, exc.message) from None

    def _tree_text(self, path: str) -> str | None:
        """A small file of the tree (None when it cannot be read): what ccdiag.host.netfacts parses."""
        try:
            return self.read_text(path, 4096)
        except HostReadError:
            return None

    def meta(self) -> dict:
        """Host name, kernel and architecture: this machine's when live, the tree's under a root
        (from its /proc/sys/kernel files; None where the tree does not say)."""
        if self.root != "/":
            from ccdiag.host.netfacts import tree_identity

            return base_meta(**tree_identity(self._tree_text), python=platform.python_version(), root=self.root,
                             source="live", environ_recorded=[])
        uname = platform.uname()
        return base_meta(hostname=socket.gethostname(), kernel=uname.release, machine=uname.machine,
                         python=platform.python_version(), root=self.root, source="live",
                         environ_recorded=list(RECORDED_ENV_PREFIXES))

    def next_epoch(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))
        self.epoch += 1

    def kill_children(self) -> int:
        """SIGKILL every command still running (a probe abandoned at its deadline may have started
        one); returns how many were signalled. Called on close and by the daemon between cycles."""
        with self._procs_lock:
            procs = [p for p in self._procs if p.poll() is None]
            self._procs = set(procs)
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        return len(procs)

    def close(self) -> None:
        self.kill_children()
        if self._nvml is not None:
            self._nvml.shutdown()


# ---------------------------------------------------------------------------------------------
class RecordingHost(LiveHost):
    """A live host that keeps everything it read; :meth:`snapshot` returns it as one object."""

    def __init__(self, root: str = "/", **kwargs: Any):
        super().__init__(root, **kwargs)
        self.snap = SnapshotData()
        self._lock = threading.RLock()
        self._nvml_init_recorded = False
        self._meta = LiveHost.meta(self)
        self._meta["source"] = "recorded"

    def _put_file(self, real: str, data: bytes) -> None:
        with self._lock:
            # a later epoch only stores what changed
            for e in range(self.epoch - 1, -1, -1):
                prev = self.snap.files.get(e, {}).get(real)
                if prev is not None:
                    if prev == data:
                        return
                    break
            self.snap.put_file(real, data, self.epoch)

    def _lookup_link(self, path: str) -> str | None:
        target = super()._lookup_link(path)
        if target is not None:
            with self._lock:
                self.snap.put_link(path, target)
        return target

    def _read_real(self, real: str, max_bytes: int) -> bytes:
        try:
            data = super()._read_real(real, max_bytes)
        except HostReadError as exc:
            with self._lock:
                self.snap.put_error(real, exc.kind, exc.errno, exc.message, self.epoch)
            raise
        self._put_file(real, data)
        return data

    def _list_real(self, real: str) -> list[str]:
        names = super()._list_real(real)
        with self._lock:
            if real not in self.snap.listings:
                self.snap.listings[real] = sorted(names)
                self.snap.put_dir(real)
                for name in names:
                    child = real.rstrip("/") + "/" + name
                    try:
                        st = os.lstat(self._fs(child))
                    except OSError:
                        continue
                    if stat.S_ISLNK(st.st_mode):
                        self._lookup_link(child)
                    elif stat.S_ISDIR(st.st_mode):
                        self.snap.put_dir(child)
        return names

    def _kind_real(self, real: str) -> str | None:
        kind = super()._kind_real(real)
        if kind == "dir":
            with self._lock:
                self.snap.put_dir(real)
        elif kind == "file":
            try:
                self._read_real(real, 65536)
            except HostReadError:
                pass
        return kind

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CommandResult:
        result = super().run(argv, timeout)
        with self._lock:
            self.snap.commands.append(dict(result.to_record(), epoch=self.epoch))
        return result

    def nvml(self, fn: str, *args: Any) -> Any:
        with self._lock:
            if not self._nvml_init_recorded:
                self._nvml_init_recorded = True
                rec: dict = {"epoch": 0, "call": ["nvmlInit"]}
                try:
                    if self._nvml is None:
                        raise NvmlCallError("nvmlInit", (), DRIVER_MISSING, None,
                                            f"NVML is not used for a tree under {self.root}")
                    self._nvml._ensure_init()
                    rec["ok"] = None
                except NvmlCallError as exc:
                    rec.update(exc.to_record())
                self.snap.nvml.append(rec)
        rec = {"epoch": self.epoch, "call": [fn, *args]}
        try:
            value = super().nvml(fn, *args)
            rec["ok"] = value
            return value
        except NvmlCallError as exc:
            rec.update(exc.to_record())
            raise
        finally:
            with self._lock:
                self.snap.nvml.append(rec)

    def _kept(self, table: dict, key: Any, value: Callable[[], Any], as_record: Callable[[Any], Any]) -> Any:
        """``value()``, kept in the snapshot's ``table[key]`` as ``as_record`` of it; a read error is
        kept there as ``{"error": ...}`` (what the replay raises again) and raised."""
        try:
            got = value()
        except HostReadError as exc:
            with self._lock:
                table[key] = {"error": {"kind": exc.kind, "errno": exc.errno, "message": exc.message}}
            raise
        with self._lock:
            table[key] = as_record(got)
        return got

    def read_kmsg(self, max_records: int = 200000, max_seconds: float = 3.0) -> list[str]:
        return self._kept(self.snap.kmsg, self.epoch, functools.partial(super().read_kmsg, max_records, max_seconds),
                          lambda lines: {"lines": lines})

    def net_interfaces(self) -> dict:
        facts = super().net_interfaces()
        with self._lock:
            self.snap.net[self.epoch] = facts
        return facts

    def statvfs(self, path: str) -> dict:
        return self._kept(self.snap.statvfs, path, functools.partial(super().statvfs, path), dict)

    def environ(self) -> dict[str, str]:
        env = super().environ()
        with self._lock:
            self.snap.environ = dict(env)
        return env

    def cloud_metadata(self, provider: str) -> str:
        return self._kept(self.snap.imds, provider, functools.partial(super().cloud_metadata, provider),
                          lambda text: {"text": text})

    def meta(self) -> dict:
        return dict(self._meta)

    def snapshot(self, **extra_meta: Any) -> SnapshotData:
        """The recording so far, with its metadata."""
        with self._lock:
            self.snap.meta = dict(self._meta, **extra_meta)
            return self.snap


# ---------------------------------------------------------------------------------------------
class ReplayHost(BaseHost):
    """Answers every question of the door from a snapshot; never touches the machine."""

    live = False

    def __init__(self, snapshot: SnapshotData | str):
        super().__init__()
        self.snap = SnapshotData.load(snapshot) if isinstance(snapshot, str) else snapshot
        with gc_paused():  # the indexes are large trees of new objects (see gc_paused)
            self._index()

    def _index(self) -> None:
        self.root = "/"
        # directory -> the names in it (a list, maybe with repeats; names interned: "vendor",
        # "device" ... repeat under every one of thousands of device directories)
        children: dict[str, list[str]] = {}
        groups: list[Iterable[str]] = [self.snap.dirs, self.snap.links]
        groups += [(p for p, v in files.items() if not (isinstance(v, dict) and v.get("kind") == "missing"))
                   for files in self.snap.files.values()]
        intern = sys.intern
        for group in groups:
            for p in group:
                parent, _, name = p.rpartition("/")
                names = children.get(parent or "/")
                if names is None:
                    children[parent or "/"] = names = []
                names.append(intern(name))
        self._children = children
        # the replayed tree never changes: each directory prefix's resolution is kept (see realpath)
        self._resolved: dict[str, str] = {}
        self._cmd_index: dict[tuple, list[dict]] = {}
        for rec in self.snap.commands:
            self._cmd_index.setdefault(tuple(rec["argv"]), []).append(rec)
        # keyed by the call as a tuple (a list argument as a tuple too): a 256-GPU snapshot holds
        # 373,000 calls, and a repr() of each took longer than the probes' reading of them
        index: dict[tuple, list[dict]] = {}
        for rec in self.snap.nvml:
            key = _call_key(rec["call"])
            found = index.get(key)
            if found is None:
                index[key] = [rec]
            else:
                found.append(rec)
        self._nvml_index = index
        partial = self.snap.meta.get(PARTIAL_RECORD_META)
        #: what a read this record lacks is (see :meth:`_absent`)
        self._partial: str | None = str(partial) if partial else None

    def _absent(self, path: str, what: str) -> HostReadError:
        """The error for a read the record does not hold: absent from the node for a full snapshot,
        not recorded for a partial record (a bug report says nothing of what it did not collect)."""
        if self._partial:
            return HostReadError(path, NOT_RECORDED_KIND, None, f"not recorded in {self._partial}")
        return HostReadError(path, "missing", errno.ENOENT, what)

    def unrecorded(self, probe: str) -> str | None:
        table = self.snap.meta.get(NOT_RECORDED_META)
        return str(table[probe]) if isinstance(table, dict) and table.get(probe) else None

    def _latest(self, records: list[dict]) -> dict | None:
        if len(records) == 1 and self.epoch >= int(records[0].get("epoch", 0)):
            return records[0]  # the usual case: a call recorded once
        best = None
        for rec in records:
            e = int(rec.get("epoch", 0))
            if e <= self.epoch and (best is None or e >= int(best.get("epoch", 0))):
                best = rec
        return best

    def _lookup_link(self, path: str) -> str | None:
        return self.snap.links.get(path)

    def realpath(self, path: str) -> str:
        """:func:`resolve_path`, from the resolution of the longest directory prefix already resolved.

        Why: probes read tens of attributes under each of thousands of device directories; resolving
        each from the root again made a 3,000-device replay quadratic in the path depth. The answer
        and the errors are the same: resolution goes left to right, so a prefix resolves alone in
        the same steps as inside the longer path, and a prefix ending in a symlink is resolved from
        the root (every hop before it counted). Only directory prefixes are kept."""
        p = normpath(path)
        known = self._resolved
        parent, _, name = p.rpartition("/")
        base = known.get(parent)
        if base is not None and name != "..":
            candidate = base + "/" + name
            if candidate not in self.snap.links:
                return candidate
        return self._walk(p)

    def _walk(self, p: str) -> str:
        parts = p.split("/")[1:]
        links, known, last = self.snap.links, self._resolved, len(parts) - 1
        raw = resolved = ""
        for k, part in enumerate(parts):
            raw += "/" + part
            cached = known.get(raw)
            if cached is not None:
                resolved = cached
                continue
            if part == "..":
                return resolve_path(p, self._lookup_link)
            resolved = resolved + "/" + part
            if resolved in links:
                try:
                    resolved = resolve_path(raw, self._lookup_link)
                except HostReadError:
                    return resolve_path(p, self._lookup_link)  # the same refusal, naming the whole path
            if k < last:
                known[raw] = raw if resolved == raw else resolved  # one string where they are equal
        return resolved or "/"

    def _value(self, real: str) -> Any:
        for e in range(self.epoch, -1, -1):
            files = self.snap.files.get(e)
            if files and real in files:
                return files[real]
        return None

    def _read_real(self, real: str, max_bytes: int) -> bytes:
        value = self._value(real)
        if isinstance(value, bytes):
            return value[:max_bytes]
        if isinstance(value, dict):
            raise HostReadError(real, value.get("kind", "io"), value.get("errno"), value.get("message", "read error"))
        if real in self.snap.dirs or real in self._children:
            raise HostReadError(real, "invalid", errno.EISDIR, "is a directory")
        raise self._absent(real, "no such file (not in snapshot)")

    def _list_real(self, real: str) -> list[str]:
        if real in self.snap.listings:
            return list(self.snap.listings[real])
        if real in self._children:
            return sorted(set(self._children[real]))
        if real in self.snap.dirs or real == "/":
            return []
        value = self._value(real)
        if value is not None:
            raise HostReadError(real, "invalid", errno.ENOTDIR, "not a directory")
        raise self._absent(real, "no such directory (not in snapshot)")

    def _kind_real(self, real: str) -> str | None:
        if real in self.snap.dirs or real in self.snap.listings or real in self._children or real == "/":
            return "dir"
        value = self._value(real)
        if isinstance(value, bytes) or (isinstance(value, dict) and value.get("kind") != "missing"):
            return "file"
        return None

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        rec = self._latest(self._cmd_index.get(argv, []))
        if rec is None:
            return CommandResult(argv, None, "", "", 0.0, False,
                                 f"not recorded in {self._partial}" if self._partial else "not recorded in snapshot")
        result = CommandResult.from_record(rec)
        if result.timed_out and result.duration_s > timeout:
            # the recording hung longer than this run would wait: honour this run's deadline
            return CommandResult(argv, None, result.stdout, result.stderr, timeout, True, None)
        return result

    def nvml(self, fn: str, *args: Any) -> Any:
        rec = self._latest(self._nvml_index.get(_call_key((fn, *args)), []))
        if rec is None:
            init = self._latest(self._nvml_index.get(("nvmlInit",), []))
            if init is not None and "error" in init:
                raise NvmlCallError(fn, args, init["error"], init.get("code"), init.get("message", ""))
            raise NvmlCallError(fn, args, NOT_RECORDED, None,
                                f"not recorded in {self._partial}" if self._partial else "not recorded in snapshot")
        if "error" in rec:
            raise NvmlCallError(fn, args, rec["error"], rec.get("code"), rec.get("message", ""))
        return rec.get("ok")

    def read_kmsg(self, **kwargs: Any) -> list[str]:
        rec = None
        for e in range(self.epoch, -1, -1):
            if e in self.snap.kmsg:
                rec = self.snap.kmsg[e]
                break
        if rec is None:
            raise self._absent("/dev/kmsg", "kernel log not in snapshot")
        if "error" in rec:
            err = rec["error"]
            raise HostReadError("/dev/kmsg", err.get("kind", "io"), err.get("errno"), err.get("message", ""))
        return list(rec.get("lines", []))

    def net_interfaces(self) -> dict:
        for e in range(self.epoch, -1, -1):
            if e in self.snap.net:
                return self.snap.net[e]
        return {"addrs": {}, "stats": {}}

    def statvfs(self, path: str) -> dict:
        rec = self.snap.statvfs.get(path)
        if rec is None:
            raise self._absent(path, "not in snapshot")
        if "error" in rec:
            err = rec["error"]
            raise HostReadError(path, err.get("kind", "io"), err.get("errno"), err.get("message", ""))
        return dict(rec)

    def environ(self) -> dict[str, str]:
        return dict(self.snap.environ or {})

    def cloud_metadata(self, provider: str) -> str:
        """The recorded answer; a snapshot that has none (recorded before ccdiag asked the service, or
        on a node whose DMI named no such cloud) says so, and nothing is asked on the network."""
        rec = self.snap.imds.get(provider)
        if rec is None:
            raise self._absent(f"imds:{provider}", "not in snapshot")
        if "error" in rec:
            err = rec["error"]
            raise HostReadError(f"imds:{provider}", err.get("kind", "io"), err.get("errno"), err.get("message", ""))
        return str(rec["text"])

    def meta(self) -> dict:
        return dict(self.snap.meta)

    def now(self) -> float:
        return float(self.snap.meta.get("time_epoch") or time.time())

    def read_attr(self, path: str) -> str:
        """:meth:`BaseHost.read_attr` in one step for a recorded file (a large node's probes read
        hundreds of thousands of attributes); anything else takes the general way."""
        value = self._value(self.realpath(path))
        if type(value) is bytes:
            return value[:65536].decode("utf-8", "replace").strip()
        return super().read_attr(path)

    def release_files(self) -> None:
        """Let go of the recorded file tree once every probe has read it: on a node with thousands
        of devices it is the largest thing a check holds, and judging and the report need it no
        more. Reads after this answer "not in snapshot", and so do NVML calls (a probe abandoned
        at its deadline would otherwise go on answering hundreds of thousands of them from the
        recording, taking the processor from the judging and the report); metadata, environment,
        commands, kernel log and interfaces stay."""
        self.snap = dataclasses.replace(self.snap, files={0: {}}, links={}, dirs=set(), listings={}, statvfs={},
                                        nvml=[])
        self._children = {}
        self._resolved = {}
        self._nvml_index = {}


def _call_key(call: Sequence[Any]) -> tuple:
    """A recorded NVML call (function name and arguments) as a dictionary key; list arguments
    (field ids) as tuples."""
    key = tuple(call)
    try:
        hash(key)
        return key
    except TypeError:
        pass
    key = tuple(tuple(a) if isinstance(a, list) else a for a in call)
    try:
        hash(key)
        return key
    except TypeError:  # nested lists or objects: only a hand-made snapshot holds these
        return ("<repr>", repr(list(call)))


def open_host(replay: str | None = None, root: str = "/", record: bool = False) -> Host:
    """The host a command works on: a replayed snapshot, or the live machine (recording or not)."""
    if replay:
        return ReplayHost(replay)
    return RecordingHost(root) if record else LiveHost(root)


__all__ = [
    "BaseHost", "CommandResult", "Host", "HostReadError", "LiveHost", "NOT_RECORDED_KIND", "RecordingHost", "ReplayHost",
    "SnapshotError", "open_host", "resolve_path", "normpath",
]
