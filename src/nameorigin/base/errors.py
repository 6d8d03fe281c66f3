"""The one exception for mistakes a user can make: a bad setting, a missing or foreign file, a request the model
cannot answer. Every entry point prints it as one line and exits 2; anything else is a bug and keeps its
traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any


class UserError(ValueError):
    """A mistake the user can fix; the message names the thing and the fix."""


def exits_2_on_user_error(main: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a script's main(): a UserError becomes `error: <message>` on stderr and exit code 2."""

    @wraps(main)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)

    return guarded
