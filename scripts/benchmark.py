"""`python scripts/benchmark.py` runs `nameorigin-benchmark` (nameorigin.cli.benchmark); see `--help`."""

import sys

from nameorigin.cli.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
