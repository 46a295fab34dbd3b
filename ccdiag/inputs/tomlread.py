"""Reading TOML files (policies, daemon settings) on every supported Python.

``tomllib`` is in the standard library from 3.11; on 3.10 the same parser comes as ``tomli``. Both
callers want one answer: the document, or one line naming the file and what is wrong with it.
"""

from __future__ import annotations

import sys
from typing import Any

from ccdiag.core.errors import UserInputError

try:
    # the type check reads the code as Python 3.10 sees it, where the standard library has no tomllib
    import tomllib as _toml  # type: ignore[import-not-found]
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 with tomli installed
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment]


class TomlError(UserInputError, ValueError):
    """A TOML text that cannot be read; the message names its source."""


def loads(text: str, source: str) -> dict[str, Any]:
    """The TOML document in ``text``; raises :class:`TomlError` naming ``source``."""
    if _toml is None:  # pragma: no cover - Python 3.10 without tomli
        raise TomlError(f"{source}: reading TOML needs Python 3.11 or the 'tomli' package")
    try:
        return _toml.loads(text)
    except _toml.TOMLDecodeError as exc:
        raise TomlError(f"{source}: not valid TOML: {exc}") from None
    except ValueError as exc:
        # the parser turns digits into int() itself, and Python refuses a string of more than
        # 4,300 digits (CVE-2020-10735): no setting of ccdiag's is that large
        if "integer string conversion" in str(exc):
            raise TomlError(f"{source}: not usable TOML: an integer of more than "
                            f"{getattr(sys, 'get_int_max_str_digits', lambda: 4300)()} digits") from None
        raise TomlError(f"{source}: not valid TOML: {exc}") from None
