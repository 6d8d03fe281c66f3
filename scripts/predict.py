"""`python scripts/predict.py CKPT NAME...` is `nameorigin predict CKPT NAME...`; see `--help`."""

import sys

from nameorigin.cli.predict import main

if __name__ == "__main__":
    sys.exit(main())
