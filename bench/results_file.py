"""Writing a bench script's result: one JSON file under bench/results (sorted keys, a final
newline, so a re-run shows as a readable diff), and the same document on stdout when asked."""

from __future__ import annotations

import json
import os


def write_result(path: str, result: dict, echo: bool = True) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
        fh.write("\n")
    if echo:
        print(json.dumps(result, indent=2, sort_keys=True))
