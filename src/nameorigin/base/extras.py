"""The optional extras ([serve], [ray], [parquet], ...): one way to ask for one, and one wording when it is
missing, naming the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from nameorigin.base.errors import UserError


def missing_extra(needed_by: str, extra: str, error: ImportError | str) -> UserError:
    """The refusal when `needed_by` cannot import what the extra installs (`error`, or the module's name)."""
    module = error if isinstance(error, str) else error.name or "a module"
    return UserError(f"{needed_by} needs {module}: pip install 'nameorigin[{extra}]' (in a clone: "
                     f"pip install -e '.[{extra}]')")


def require_extra(module: str, extra: str, needed_by: str) -> ModuleType:
    """`module` imported, or the one-line refusal naming `extra`."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise missing_extra(needed_by, extra, error) from None
