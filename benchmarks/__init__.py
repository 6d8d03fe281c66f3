"""The measurement tools: benchmarks, load and scale tests, the reuse demo and the analysis runs behind the figures
in docs/. They import nameorigin and are run from a clone (`python -m benchmarks.<tool> --help`); the installed
package holds none of them."""

import os
from pathlib import Path


def clone_env() -> dict[str, str]:
    """The environment for `python -m benchmarks.<tool>` in a child process, from any folder: the clone's root on
    PYTHONPATH."""
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
