"""`python scripts/export.py` runs `nameorigin-export` (nameorigin.cli.export); see `--help`."""

import sys

from nameorigin.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
