"""`python -m nameorigin` is the `nameorigin` command (nameorigin.cli.app)."""

import sys

from nameorigin.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
