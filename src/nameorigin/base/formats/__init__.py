"""Table formats, chosen by a file's suffix as cells are chosen by name (nameorigin.base.registry): each is a module
of this package with a reader and a writer (nameorigin.base.formats.common.TableFormat), and one entry of FORMATS,
which names its class. A suffix no format claims reads as the first entry, delimited text. A format's module is
imported when a table is first opened, so a format's own libraries load only for its files."""

from __future__ import annotations

from pathlib import Path

from nameorigin.base.errors import UserError
from nameorigin.base.formats.common import TableFormat
from nameorigin.base.registry import Registry

FORMATS = Registry("table format", {
    "delimited": "nameorigin.base.formats.delimited:Delimited",
    "parquet": "nameorigin.base.formats.parquet:Parquet",
    "jsonl": "nameorigin.base.formats.jsonl:JsonLines",
})


def formats() -> tuple[type[TableFormat], ...]:
    return tuple(fmt for _, fmt in FORMATS.items())


def format_of(path: str | Path) -> type[TableFormat]:
    """The format a file's suffix names (delimited text for any other suffix)."""
    suffix = Path(path).suffix.lower()
    return next((fmt for fmt in formats() if suffix in fmt.suffixes), formats()[0])


def known_suffixes() -> tuple[str, ...]:
    return tuple(suffix for fmt in formats() for suffix in fmt.suffixes)


def described() -> str:
    """The formats as a user reads them: "delimited text (.csv/.txt/.tsv/.tab), Parquet (.parquet/.pq), ..."."""
    return ", ".join(f"{fmt.name} ({'/'.join(fmt.suffixes)})" for fmt in formats())


def written_format(path: str | Path, setting: str = "--out") -> type[TableFormat]:
    """The format to write `path` in, refused when its suffix names no format."""
    suffix = Path(path).suffix.lower()
    if suffix not in known_suffixes():
        raise UserError(f"{setting} {path}: unknown table suffix {suffix or '(none)'!r}: end the name in "
                        f"{', '.join(known_suffixes())}")
    return format_of(path)


def output_format(path: str | Path, source: str | Path, setting: str = "--out") -> type[TableFormat]:
    """The format to write `path` in; refused when it is the input or its suffix names no format."""
    path, source = Path(path), Path(source)
    if path.exists() and path.resolve() == source.resolve() or path.absolute() == source.absolute():
        raise UserError(f"{setting} {path} is the input table: write the scored table to another file")
    return written_format(path, setting)
