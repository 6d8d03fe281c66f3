"""`python scripts/serve.py` runs `nameorigin-serve` (nameorigin.cli.serve); see `--help`."""

import sys

from nameorigin.cli.serve import main

if __name__ == "__main__":
    sys.exit(main())
