"""The commands' flags for prediction options, read off PredictOptions' fields: a field is a flag (`top_k` is
--top-k), its help is the field's, and the flags come back as one PredictOptions. A new option is a field there,
not a flag here."""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, Field
from typing import Any

from nameorigin.serving.options import PredictOptions, option_fields

NAMES_TOP_K, TABLE_TOP_K = 3, 1  # a list of names shows three labels each; a table's rows the best one


def flag_of(field: Field) -> str:
    return field.metadata["flag"] or "--" + field.name.replace("_", "-")


def value_type(hint: Any) -> type:
    """int or float for a number option (optional or not), else str (a prior's name or file)."""
    kinds = [kind for kind in typing.get_args(hint) if kind is not type(None)] or [hint]
    return kinds[0] if kinds[0] in (int, float) else str


def add_prediction_flags(parser: argparse.ArgumentParser, names: list[str] | None = None) -> None:
    """One flag per PredictOptions field (those in `names`, when given). top_k's default is left to the caller:
    NAMES_TOP_K for a list of names, TABLE_TOP_K for a table's rows."""
    hints = typing.get_type_hints(PredictOptions)
    for field in option_fields():
        if names is not None and field.name not in names:
            continue
        help_text = field.metadata["help"]
        if hints[field.name] is bool:
            action = "store_false" if field.default else "store_true"
            parser.add_argument(flag_of(field), dest=field.name, action=action, help=help_text)
            continue
        default = None if field.name == "top_k" else field.default
        shown = f" (default {NAMES_TOP_K}; {TABLE_TOP_K} for a table's rows)" if field.name == "top_k" else \
            "" if default is None or default is MISSING else f" (default {default})"
        parser.add_argument(flag_of(field), dest=field.name, type=value_type(hints[field.name]), default=default,
                            help=help_text + shown)


def options_from(args: argparse.Namespace, top_k: int = NAMES_TOP_K) -> PredictOptions:
    """The PredictOptions the flags give (checked on creation: a bad combination is one UserError)."""
    given = {field.name: getattr(args, field.name) for field in option_fields() if hasattr(args, field.name)}
    if given.get("top_k") is None:
        given["top_k"] = top_k
    return PredictOptions(**given)
