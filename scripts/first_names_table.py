"""`python scripts/first_names_table.py` runs `nameorigin-first-names-table`; see `--help`."""

import sys

from nameorigin.cli.first_names_table import main

if __name__ == "__main__":
    sys.exit(main())
