"""Environment files: the ``KEY=VALUE`` lines users keep their NCCL settings in.

``ccdiag check --env-file`` and ``ccdiag nccl --env-file`` judge the settings of such a file
instead of the process environment, and ``ccdiag nccl`` also reads ``/etc/nccl.conf`` (same
syntax) through the host door. Reading the file is apart from parsing its text, so the parser is a
pure function tested from a table.
"""

from __future__ import annotations

from ccdiag.core.errors import UserInputError
from ccdiag.core.userfiles import read_user_text

#: the largest environment file read (real ones are a few hundred bytes)
MAX_ENV_FILE_BYTES = 1 << 20


class EnvFileError(UserInputError, ValueError):
    """A line of an environment file that is not ``KEY=VALUE``; the message names file and line."""


def _is_name(key: str) -> bool:
    return bool(key) and (key[0].isalpha() or key[0] == "_") and all(c.isalnum() or c == "_" for c in key)


def _value(value: str, key: str, where: str) -> str:
    """The value as the shell would see it: quotes removed, an unquoted `` #`` comment cut."""
    value = value.strip()
    if value[:1] not in ("'", '"'):
        hash_at = value.find(" #")
        return value[:hash_at].rstrip() if hash_at >= 0 else value
    quote = value[0]
    end = value.rfind(quote)
    if end == 0:
        raise EnvFileError(f"{where}: unterminated {quote} quote in {key}")
    inner = value[1:end]
    if quote == '"':
        inner = inner.replace('\\"', '"').replace("\\\\", "\\")
    return inner


def parse_env_file(text: str, source: str = "<env>") -> dict[str, str]:
    """``KEY=VALUE`` lines as a shell ``source``-able env file writes them: blank lines and ``#``
    comments skipped, an ``export`` prefix allowed, single or double quotes removed (a value in
    single quotes is literal; double quotes honour ``\\"`` and ``\\\\``), an unquoted value ends at
    `` #``."""
    env: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("export ", "export\t")):
            line = line[len("export"):].strip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _is_name(key):
            raise EnvFileError(f"{source}:{n}: expected KEY=VALUE, got {raw.strip()!r}")
        env[key] = _value(value, key, f"{source}:{n}")
    return env


def load_env_file(path: str) -> dict[str, str]:
    """The settings of the environment file ``path`` (raises a :class:`UserInputError` naming it)."""
    return parse_env_file(read_user_text(path, "environment file", MAX_ENV_FILE_BYTES), source=path)


__all__ = ["EnvFileError", "MAX_ENV_FILE_BYTES", "load_env_file", "parse_env_file"]
