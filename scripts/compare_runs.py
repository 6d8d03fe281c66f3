"""`python scripts/compare_runs.py` runs `nameorigin-compare-runs` (nameorigin.cli.compare_runs); see `--help`."""

import sys

from nameorigin.cli.compare_runs import main

if __name__ == "__main__":
    sys.exit(main())
