"""`nameorigin first-names-table` and `nameorigin nana-table`: the tables the gender and NaNa experiments train on,
converted from packages of the registry (names-dataset; name2nat's wheel, read as a zip archive, never installed,
its pickle read by an unpickler that refuses every global)."""

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from nameorigin.base.errors import UserError

FIRST_NAMES_OUT, NANA_OUT = Path("data/first_names/gender.csv"), Path("data/nana/nana.csv")
OutTable = Annotated[Path, typer.Option(dir_okay=False, help="the CSV to write; its counts and decisions go beside "
                                        "it as .json")]


def first_names_table(out: OutTable = FIRST_NAMES_OUT,
                      sample: Annotated[int | None, typer.Option(min=2, help="keep only this many names, drawn at "
                                                                 "random (seed 0): a smaller table of the same kind "
                                                                 "(docs/speed.md times 30k and 150k)")] = None) -> int:
    """names-dataset's first names as a table of gender shares (name,F,M), for experiment=first_name_gender."""
    from nameorigin.data.first_names import convert_first_names

    record = convert_first_names(out, sample=sample)
    print(json.dumps(record["counts"], indent=1))
    print(f"wrote {out} ({record['counts']['kept']} names) and {out.with_suffix('.json')}")
    return 0


def nana_table(wheel: Annotated[Path | None, typer.Option(exists=True, dir_okay=False, help="name2nat's wheel "
                                                          "(name2nat-0.5.1-py3-none-any.whl), already "
                                                          "downloaded")] = None,
               fetch: Annotated[bool, typer.Option("--fetch", help="download the wheel with pip (name2nat==0.5.1, "
                                                   "--no-deps) into a temporary folder first")] = False,
               out: OutTable = NANA_OUT) -> int:
    """name2nat's NaNa (Wikipedia full names -> nationalities) as a table, for experiment=nana."""
    from nameorigin.data.nana import convert_nana, fetch_wheel

    if fetch == (wheel is not None):
        raise UserError("nana-table reads name2nat's wheel: pass --fetch to download it, or --wheel FILE, not both")
    if fetch:
        with tempfile.TemporaryDirectory() as folder:
            record = convert_nana(fetch_wheel(Path(folder)), out)
    else:
        record = convert_nana(wheel, out)
    print(json.dumps(record["counts"], indent=1))
    print(f"wrote {out} ({record['counts']['names']} names, {record['counts']['nationalities']} nationalities) "
          f"and {out.with_suffix('.json')}")
    return 0
