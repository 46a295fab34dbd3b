"""``python -m ccdiag`` runs the same CLI as the ``ccdiag`` console script."""

from ccdiag.cli import main

if __name__ == "__main__":  # pragma: no cover - exercised through subprocess tests
    main()
