"""Write name2nat's NaNa (Wikipedia full names -> nationalities) as a table for `data=table`:

  nameorigin-nana-table --fetch                     # downloads name2nat==0.5.1 (no dependencies), then converts
  nameorigin-nana-table --wheel name2nat-0.5.1-py3-none-any.whl
  python train.py experiment=nana                   # train on data/nana/nana.csv

The wheel is read as a zip archive, never installed; its pickle is read with an unpickler that refuses every
global (nameorigin.data.nana).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.nana import WHEEL, convert_nana, fetch_wheel

DEFAULT_OUT = "data/nana/nana.csv"


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--wheel", type=Path, help=f"name2nat's wheel ({WHEEL}), already downloaded")
    source.add_argument("--fetch", action="store_true", help="download the wheel with pip (name2nat==0.5.1, "
                        "--no-deps) into a temporary folder first")
    parser.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), help=f"the CSV to write (default "
                        f"{DEFAULT_OUT}); its counts and decisions go beside it as .json")
    args = parser.parse_args(argv)
    if args.out.is_dir():
        raise UserError(f"--out {args.out} is a folder: pass the path of the CSV to write")
    if args.fetch:
        with tempfile.TemporaryDirectory() as folder:
            record = convert_nana(fetch_wheel(Path(folder)), args.out)
    else:
        record = convert_nana(args.wheel, args.out)
    print(json.dumps(record["counts"], indent=1))
    print(f"wrote {args.out} ({record['counts']['names']} names, {record['counts']['nationalities']} nationalities) "
          f"and {args.out.with_suffix('.json')}")
    return 0
