"""A name read as parts (given and family, or any ordered list of columns): one string inside the project, the
parts joined by a boundary character the model learns as a token of its own.

A part never holds the boundary (a "|" inside a cell becomes a space), so splitting the string gives the parts back.
The family part is the last one: columns are listed given first (`data.name_columns=[given,family]`), and a full
name split by nameparser comes as [given (first and middle names), family]. An empty part stays in its place
("|Madonna" is a family name alone), so a part's position always says which part it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nameorigin.base.errors import UserError

BOUNDARY = "|"
PARSED_PARTS = ("given", "family")  # what a full name split by nameparser yields, in order


def join_parts(parts: Sequence[str]) -> str:
    """The parts as one name: each stripped, a boundary inside a part made a space; "" when every part is blank."""
    cleaned = [" ".join(str(part).replace(BOUNDARY, " ").split()) for part in parts]
    return BOUNDARY.join(cleaned) if any(cleaned) else ""


def split_parts(name: str) -> list[str]:
    return name.split(BOUNDARY)


def glue_parts(name: str) -> str:
    """The parts as one plain string, "Given Family": what a one-string model reads of the same person."""
    return " ".join(part for part in split_parts(name) if part)


@dataclass
class ParsedName:
    given: str
    family: str
    unsplit: bool  # one of the two parts is empty ("Madonna": a given name alone)
    comma: bool  # written "Family, Given" ("Lincoln, Abraham"); "Mao Zedong" has no comma and is read as given "Mao"


def parse_full_name(full: str) -> ParsedName:
    """A full name split by nameparser (titles, suffixes and nicknames dropped; "Family, Given" understood):
    given = first and middle names, family = last name. The library reads Western order: a family-first name
    without a comma comes back with its parts swapped, which the caller can count but not undo."""
    try:
        from nameparser import HumanName
    except ImportError as error:  # a core dependency; a broken install names it
        raise UserError(f"splitting full names needs nameparser, a dependency of nameorigin ({error}): install "
                        "nameorigin again") from None
    parsed = HumanName(str(full))
    given = " ".join(part for part in (parsed.first, parsed.middle) if part)
    return ParsedName(given, parsed.last, not (given and parsed.last), "," in str(full))


def parts_of(value: str | Sequence[str], expected: Sequence[str] | None,
             full_names: bool = False) -> list[str] | None:
    """What a caller gave for one name as the model's parts: a list given as parts (its length checked), a string
    holding the boundary as its parts, or, when the caller says it is a full name (`full_names`) and the model reads
    [given, family], a plain string split by nameparser. None for a model of one string given one string.
    Refusals name the model's parts."""
    if expected is None:
        if isinstance(value, str):
            return None
        raise UserError(f"{list(value)!r} is given as {len(value)} parts, but this model reads a name as one "
                        "string: give the whole name, or use a model trained on parts (data.name_columns)")
    if isinstance(value, str):
        if BOUNDARY in value:
            value = split_parts(value)
        elif tuple(expected) == PARSED_PARTS and full_names:
            parsed = parse_full_name(value)
            return [parsed.given, parsed.family]
        elif tuple(expected) == PARSED_PARTS:
            raise UserError(f"{value!r} is one string, but this model reads a name as 2 parts (given, family): give "
                            "each part (--column once per part), or say it is a full name (--full-names, "
                            "full_names=True)")
        else:
            raise UserError(f"{value!r} is one string, but this model reads a name as {len(expected)} parts "
                            f"({', '.join(expected)}): give each part (--column once per part)")
    if len(value) != len(expected):
        raise UserError(f"{list(value)!r} has {len(value)} parts, but this model reads {len(expected)} "
                        f"({', '.join(expected)}): give them in that order")
    return [str(part) for part in value]


def boundary_index(vocab: Sequence[str], name_parts: dict | None) -> int:
    """Where the boundary sits in a vocabulary, for a model that reads it (`name_parts`, the checkpoint's record:
    {"names": [...], "join": "boundary" | "space"}); -1 for a model of one string or of parts glued by spaces."""
    if not name_parts or name_parts.get("join") != "boundary" or BOUNDARY not in vocab:
        return -1
    return list(vocab).index(BOUNDARY)
