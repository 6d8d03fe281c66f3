"""`python scripts/nana_table.py` runs `nameorigin-nana-table`; see `--help`."""

import sys

from nameorigin.cli.nana_table import main

if __name__ == "__main__":
    sys.exit(main())
