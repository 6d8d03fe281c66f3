"""The one exception for mistakes a user can make: a bad setting, a missing or foreign file, a request the model
cannot answer. Every entry point prints it as one line and exits with its code (2; 1 for a file that could not be
written, a full disk); anything else is a bug and keeps its traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any


class UserError(ValueError):
    """A mistake the user can fix; the message names the thing and the fix."""

    exit_code = 2


class WriteError(UserError):
    """A file that could not be written (a full disk, a size limit, no permission): nothing was left under its
    name, and a previous file there is unchanged (nameorigin.base.atomic)."""

    exit_code = 1

    def __init__(self, path: object, cause: str):
        super().__init__(f"cannot write {path} ({cause}): nothing was written there and any previous file is "
                         "unchanged; free some space or write elsewhere")


def exits_2_on_user_error(main: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a script's main(): a UserError becomes `error: <message>` on stderr and its exit code (2)."""

    @wraps(main)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(error.exit_code)

    return guarded
