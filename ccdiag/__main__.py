"""``python -m ccdiag`` runs the same CLI as the ``ccdiag`` console script.

The version guard comes first and is written so that any Python 3 (and 2.7) can parse it: run from
a source tree with an older interpreter, ccdiag says in one line what it needs (exit 2) instead of
failing on the first newer syntax it meets.
"""

import sys

if sys.version_info < (3, 10):
    sys.stderr.write("ccdiag: ccdiag needs Python >= 3.10; this is Python %d.%d.%d (%s). On RHEL/Rocky 8 or 9 "
                     "install python3.11 (dnf install python3.11) and run it with that.\n"
                     % (sys.version_info[0], sys.version_info[1], sys.version_info[2], sys.executable))
    sys.exit(2)

from ccdiag.commands.cli import main  # noqa: E402

if __name__ == "__main__":  # pragma: no cover - exercised through subprocess tests
    main()
