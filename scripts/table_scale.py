"""`python scripts/table_scale.py` runs `nameorigin-table-scale` (nameorigin.cli.table_scale); see `--help`."""

import sys

from nameorigin.cli.table_scale import main

if __name__ == "__main__":
    sys.exit(main())
