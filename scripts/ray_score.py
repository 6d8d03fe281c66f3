"""`python scripts/ray_score.py` runs `nameorigin-ray-score` (nameorigin.cli.ray_score); see `--help`."""

import sys

from nameorigin.cli.ray_score import main

if __name__ == "__main__":
    sys.exit(main())
