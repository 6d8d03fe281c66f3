"""name2nat's NaNa (1,074,617 Wikipedia full names -> 176 nationalities) as a table for `data=table`:

    nameorigin nana-table --fetch                 # pip download name2nat==0.5.1 --no-deps, then convert
    nameorigin nana-table --wheel name2nat-0.5.1-py3-none-any.whl
    python train.py experiment=nana

NaNa ships inside name2nat's wheel as `name2nat/name2nats.pkl`, a pickled dict of full names to lists of
nationalities. A pickle can run code when it is loaded, so it is read with an unpickler that admits no global at
all (a dict of lists of strings needs none) and then checked for that shape; the wheel is never installed.

Decisions, with their counts in the JSON: names stay as written (spaces, accents and punctuation kept; the
training config's data.normalize decides the rest); names longer than 64 characters and names with no nationality
are skipped; a name's repeated nationality is kept once; nationalities held by fewer than 3 names are dropped (a
label needs a name in each of train, validation and test), and so is a name left with none.
"""

from __future__ import annotations

import csv
import io
import json
import pickle
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

from nameorigin.base.atomic import write_atomically
from nameorigin.base.digest import file_sha256
from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import MAX_NAME_LENGTH

WHEEL = "name2nat-0.5.1-py3-none-any.whl"
MEMBER = "name2nat/name2nats.pkl"
SEPARATOR = ";"  # several nationalities in one cell: data.label_separator's default
MIN_NAMES = 3  # a nationality's names: one each for train, validation and test


class NoGlobals(pickle.Unpickler):
    """Builds only what the pickle protocol makes without a global (dicts, lists, strings, numbers): any request
    for a class or function, the way a pickle runs code, is refused before anything is called."""

    def __init__(self, raw: bytes, source: str):
        super().__init__(io.BytesIO(raw))
        self.source = source  # what the refusal names

    def find_class(self, module: str, name: str) -> None:
        raise UserError(f"{self.source} asks for {module}.{name}, which a table of names never needs: refused, "
                        f"nothing in it was run; pass name2nat's own {WHEEL}")


def read_name2nats(wheel: Path) -> dict[str, list[str]]:
    """The wheel's name -> nationalities dict, read without installing or importing anything from it."""
    if not wheel.is_file():
        state = "is a folder" if wheel.is_dir() else "does not exist"
        raise UserError(f"--wheel {wheel} {state}: pass {WHEEL} (or --fetch to download it)")
    try:
        with zipfile.ZipFile(wheel) as archive:
            if MEMBER not in archive.namelist():
                raise UserError(f"--wheel {wheel} holds no {MEMBER}: it is not name2nat's wheel; pass {WHEEL}")
            raw = archive.read(MEMBER)
    except zipfile.BadZipFile:
        raise UserError(f"--wheel {wheel} is not a wheel (not a zip archive): pass {WHEEL}") from None
    try:
        table = NoGlobals(raw, f"{MEMBER} in {wheel}").load()
    except UserError:
        raise
    except Exception as error:  # a truncated or corrupt pickle raises any of several types
        raise UserError(f"{MEMBER} in {wheel} is not a readable pickle ({error}): download the wheel again") from None
    if not (isinstance(table, dict)
            and all(isinstance(name, str) and isinstance(nats, list) and all(isinstance(n, str) for n in nats)
                    for name, nats in table.items())):
        raise UserError(f"{MEMBER} in {wheel} is not a dict of names to lists of nationalities "
                        f"(it holds a {type(table).__name__}): pass name2nat's own {WHEEL}")
    return table


def fetch_wheel(folder: Path) -> Path:
    """name2nat's wheel from the package index, without its dependencies (it needs Flair to run, not to read)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder), "name2nat==0.5.1"]
    done = subprocess.run(command, capture_output=True, text=True)
    wheel = folder / WHEEL
    if done.returncode != 0 or not wheel.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"pip could not download name2nat==0.5.1 ({last}): download {WHEEL} by hand and pass "
                        "--wheel")
    return wheel


def convert_nana(wheel: Path, out: Path) -> dict:
    """Write `out` (name,nationality; several `;`-separated) and its .json of counts; returns the JSON's content."""
    table = read_name2nats(wheel)
    counts = Counter(raw_names=len(table), raw_pairs=sum(len(nats) for nats in table.values()))
    kept: dict[str, list[str]] = {}
    for name, nationalities in table.items():
        unique = list(dict.fromkeys(n.strip() for n in nationalities if n.strip()))
        if SEPARATOR in "".join(unique):
            raise UserError(f"{MEMBER} in {wheel}: the nationality of {name!r} holds {SEPARATOR!r}, the label "
                            f"separator: pass name2nat's own {WHEEL}")
        counts["repeated_nationality"] += sum(len(n.strip()) > 0 for n in nationalities) - len(unique)
        if not name.strip():
            counts["skipped_blank_name"] += 1
        elif len(name.strip()) > MAX_NAME_LENGTH:
            counts["skipped_long_name"] += 1
        elif not unique:
            counts["skipped_no_nationality"] += 1
        else:
            kept[name.strip()] = unique
    del table
    holders = Counter(n for nats in kept.values() for n in nats)
    rare = {n: c for n, c in sorted(holders.items()) if c < MIN_NAMES}
    if rare:
        for name in list(kept):
            kept[name] = [n for n in kept[name] if n not in rare]
            if not kept[name]:
                del kept[name]
                counts["skipped_rare_nationality_only"] += 1
    names = sorted(kept)
    nationalities = sorted({n for nats in kept.values() for n in nats})
    counts.update(names=len(names), pairs=sum(len(kept[n]) for n in names), nationalities=len(nationalities),
                  names_with_several=sum(len(kept[n]) > 1 for n in names),
                  names_not_ascii=sum(not n.isascii() for n in names))

    def write_csv(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["name", "nationality"])
            writer.writerows((name, SEPARATOR.join(kept[name])) for name in names)

    write_atomically(out, write_csv)
    record = {"source": f"name2nat 0.5.1 (Apache-2.0), {MEMBER}", "wheel_sha256": file_sha256(wheel), "table": out.name,
            "sha256": file_sha256(out), "columns": ["name", "nationality"], "label_separator": SEPARATOR,
            "counts": dict(counts), "dropped_nationalities": rare, "nationalities": nationalities,
            "decisions": __doc__.split("Decisions, ")[1].strip()}
    write_atomically(out.with_suffix(".json"), lambda p: p.write_text(json.dumps(record, indent=1)))
    return record
