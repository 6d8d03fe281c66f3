"""Write names-dataset's first names as a table of gender shares (name,F,M) for `data=table`:

  python scripts/first_names_table.py                       # data/first_names/gender.csv (+ .json: counts)
  python train.py experiment=first_name_gender              # train on it
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.first_names import convert_first_names

DEFAULT_OUT = "data/first_names/gender.csv"


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"the CSV to write (default {DEFAULT_OUT}); its "
                        "counts and decisions go beside it as .json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.is_dir():
        raise UserError(f"--out {out} is a folder: pass the path of the CSV to write")
    record = convert_first_names(out)
    print(json.dumps(record["counts"], indent=1))
    print(f"wrote {out} ({record['counts']['kept']} names) and {out.with_suffix('.json')}")
    return 0
