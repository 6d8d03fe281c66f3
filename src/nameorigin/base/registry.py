"""One mechanism for every variant chosen by name (a cell, a table format, a subcommand): a Registry maps each
name to "module:attribute", imported when first asked for, so a variant's own libraries load only when it is
used, and a new variant is one entry."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from nameorigin.base.errors import UserError


class Registry:
    """Variants of one kind by name; `kind` names the setting in a refusal (model.cell, a table format)."""

    def __init__(self, kind: str, entries: dict[str, str]):
        self.kind, self.entries = kind, dict(entries)
        self.loaded: dict[str, Any] = {}

    def names(self) -> list[str]:
        return list(self.entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __getitem__(self, name: str) -> Any:
        if name not in self.entries:
            raise UserError(f"{self.kind}={name} is not one of {', '.join(self.entries)}")
        if name not in self.loaded:
            module, attribute = self.entries[name].split(":")
            self.loaded[name] = getattr(importlib.import_module(module), attribute)
        return self.loaded[name]

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((name, self[name]) for name in self.entries)
