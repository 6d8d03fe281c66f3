"""`python scripts/predict.py` runs `nameorigin-predict` (nameorigin.cli.predict); see `--help`."""

import sys

from nameorigin.cli.predict import main

if __name__ == "__main__":
    sys.exit(main())
