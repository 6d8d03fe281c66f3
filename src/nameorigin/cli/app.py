"""The `nameorigin` command: one Typer app whose subcommands are typed functions (nameorigin.cli.*), their flags,
types, choices and help read from each signature. Every refusal is one line and exit code 2: a flag Typer cannot
parse, and a UserError from the code it calls.

  nameorigin --help                       # every subcommand
  nameorigin predict refit.ckpt Nakamura  # each subcommand's --help lists its flags
"""

import functools
import inspect
import sys
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from nameorigin.base.errors import UserError
from nameorigin.base.registry import Registry
from nameorigin.serving.options import TABLE_OPTIONS, PredictOptions, option_fields

app = typer.Typer(name="nameorigin", add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Character-level recurrent classifiers of a name's origin: answer, evaluate, explain, export "
                  "and serve the models `python train.py` writes.")

# The subcommands (nameorigin.base.registry), in the order the help lists them: each a typed function of its module,
# its flags and help read off its signature.
COMMANDS = Registry("command", {
    "predict": "nameorigin.cli.predict:predict", "evaluate": "nameorigin.cli.evaluate:evaluate",
    "card": "nameorigin.cli.evaluate:card", "composition": "nameorigin.cli.composition:composition",
    "export": "nameorigin.cli.export:export", "serve": "nameorigin.cli.serve:serve",
    "ray-score": "nameorigin.cli.ray_score:ray_score", "first-names-table": "nameorigin.cli.tables:first_names_table",
    "nana-table": "nameorigin.cli.tables:nana_table", "compare-runs": "nameorigin.cli.compare_runs:compare_runs",
    "audit": "nameorigin.cli.audit:audit",
})
# A list of names shows PredictOptions' own top_k each; a table's rows TABLE_OPTIONS' (the best one).
NAMES_TOP_K, TABLE_TOP_K = PredictOptions().top_k, TABLE_OPTIONS.top_k


def option_parameter(field: Any, hint: Any) -> inspect.Parameter:
    """A PredictOptions field as a keyword parameter Typer reads as a flag (its help the field's)."""
    help_text, dashed = field.metadata["help"], field.name.replace("_", "-")
    if hint is bool:  # a switch; one that is on by default is turned off with --no-<name>
        flag = f"--{dashed}/--no-{dashed}" if field.default else f"--{dashed}"
        return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                                 annotation=Annotated[bool, typer.Option(flag, help=help_text)])
    kinds = [kind for kind in typing.get_args(hint) if kind is not type(None)] or [hint]
    kind = kinds[0] if kinds[0] in (int, float) else str
    if field.name == "top_k":  # its default is the caller's: three for names, one for a table's rows
        help_text += f" [default: {NAMES_TOP_K}; {TABLE_TOP_K} for a table's rows]"
        return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Annotated[int | None, typer.Option(min=1, help=help_text)])
    minimum = {"min": 1} if kind is int else {}
    default = field.default
    annotation = kind if default is not None else kind | None
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation, typer.Option(help=help_text, **minimum)])


def takes_options(names: tuple[str, ...] | None = None) -> Callable[[Callable], Callable]:
    """A command with an `options` parameter gets one flag per PredictOptions field (those in `names`), read off
    the dataclass; the flags' values reach it as `options`, a dict that `predict_options` turns into one
    PredictOptions with the command's default top_k."""

    def wrap(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        hints = typing.get_type_hints(PredictOptions)
        chosen = [f for f in option_fields() if names is None or f.name in names]
        own = [p for p in signature.parameters.values() if p.name != "options"]

        @functools.wraps(command)
        def run(**given: Any) -> Any:
            settings = {f.name: given.pop(f.name) for f in chosen}
            return command(options=settings, **given)

        run.__signature__ = signature.replace(parameters=[*own, *(option_parameter(f, hints[f.name]) for f in chosen)])
        del run.__wrapped__  # Typer reads __signature__, not the function it wraps
        return run

    return wrap


def predict_options(settings: dict[str, Any], top_k: int) -> PredictOptions:
    """The flags' settings as one PredictOptions (checked on creation), with the command's default top_k."""
    return PredictOptions(**{**settings, "top_k": settings.get("top_k") or top_k})


@functools.cache
def command_line() -> Any:
    """The `nameorigin` command with every subcommand of COMMANDS on it (made once per process)."""
    for name, command in COMMANDS.items():
        app.command(name)(command)
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """The console script: the app run without Click's standalone handling, so a usage error is one line too
    (`error: ...` on stderr, exit code 2, raised as SystemExit)."""
    command = command_line()
    try:
        result = command.main(args=sys.argv[1:] if argv is None else argv, prog_name="nameorigin",
                              standalone_mode=False)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except BrokenPipeError:  # `| head` closed the pipe: not an error
        return 0
    except Exception as error:
        if not (hasattr(error, "format_message") and hasattr(error, "exit_code")):  # Click's usage errors
            raise
        if type(error).__name__ == "NoArgsIsHelpError":  # `nameorigin` alone: its help, as --help gives it
            print(error.format_message())
            return 0
        print(f"error: {error.format_message()}", file=sys.stderr)
        sys.exit(error.exit_code or 2)
    return result if isinstance(result, int) else 0
