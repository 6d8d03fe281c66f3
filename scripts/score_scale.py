"""`python scripts/score_scale.py` runs `nameorigin-score-scale` (nameorigin.cli.score_scale); see `--help`."""

import sys

from nameorigin.cli.score_scale import main

if __name__ == "__main__":
    sys.exit(main())
