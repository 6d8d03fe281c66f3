"""`python scripts/serve_load.py` runs `nameorigin-serve-load` (nameorigin.cli.serve_load); see `--help`."""

import sys

from nameorigin.cli.serve_load import main

if __name__ == "__main__":
    sys.exit(main())
