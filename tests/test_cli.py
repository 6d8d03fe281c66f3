"""The one `nameorigin` command: every subcommand listed by `nameorigin --help`, every flag of every subcommand
with its help text (read from the signature), and the package's scripts table holding that command alone."""

from __future__ import annotations

from importlib import metadata

import pytest

from nameorigin.cli.app import COMMANDS, command_line
from nameorigin.cli.app import main as nameorigin

SUBCOMMANDS = ["predict", "evaluate", "card", "composition", "export", "serve", "ray-score", "first-names-table",
               "nana-table", "compare-runs", "audit"]


def command():
    return command_line()


def test_the_package_installs_one_command():
    scripts = {entry.name: entry.value for entry in metadata.distribution("nameorigin").entry_points
               if entry.group == "console_scripts"}
    assert scripts == {"nameorigin": "nameorigin.cli.app:main"}


def test_nameorigin_help_lists_every_subcommand(capsys):
    assert nameorigin(["--help"]) == 0
    shown = capsys.readouterr().out
    assert all(f"  {name} " in shown for name in SUBCOMMANDS)
    assert sorted(command().commands) == sorted(SUBCOMMANDS) == sorted(COMMANDS)
    assert nameorigin([]) == 0  # the command alone: the same list, not an error
    alone = capsys.readouterr()
    assert all(f"  {name} " in alone.out for name in SUBCOMMANDS) and alone.err == ""


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_flag_of_every_subcommand_has_its_help(name, capsys):
    sub = command().commands[name]
    assert sub.help, f"{name} has no description"
    for param in sub.params:
        assert param.help, f"{name}: {param.name} has no help"
    assert nameorigin([name, "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    for param in sub.params:
        assert " ".join(param.help.split())[:40] in shown, (name, param.name)
