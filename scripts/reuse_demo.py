"""`python scripts/reuse_demo.py` runs `nameorigin-reuse-demo` (nameorigin.cli.reuse_demo); see `--help`."""

import sys

from nameorigin.cli.reuse_demo import main

if __name__ == "__main__":
    sys.exit(main())
