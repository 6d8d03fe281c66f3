"""The code's shape, checked on the real package: no function over 60 lines or over 7 parameters (the Triton kernels
and the hand-written BPTT autograd functions aside, whose signatures are the kernels' and autograd's, and the
parameters of the command's subcommands, which are their flags), and one place for what the project does once: a
SHA-256 of a file, reading a checkpoint, asking for an extra."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "src" / "nameorigin"
MAX_LINES, MAX_PARAMETERS = 60, 7
# Their parameters are the kernel's or autograd's tensors, one each.
EXEMPT_MODULES = {"model/triton_loop.py", "model/bptt.py"}
EXEMPT_FUNCTIONS = {"bptt_forward", "bptt_backward"}


def subcommand_functions(root: Path) -> set[tuple[str, str]]:
    """(module, function) of every subcommand in the `nameorigin` command's registry (COMMANDS in cli/app.py, read
    as text): their parameters are their flags."""
    app = root / "cli" / "app.py"
    text = app.read_text(encoding="utf-8") if app.is_file() else ""
    return set(re.findall(r'"[\w-]+": "nameorigin\.cli\.(\w+):(\w+)"', text))


def functions(path: Path, subcommands: frozenset = frozenset()) -> list[tuple[str, int, int]]:
    """(name, lines, parameters less self/cls; 0 for a subcommand) of every function in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            parameters = len(names) - (1 if names and names[0] in ("self", "cls") else 0)
            subcommand = (path.stem, node.name) in subcommands and path.parent.name == "cli"
            found.append((node.name, node.end_lineno - node.lineno + 1, 0 if subcommand else parameters))
    return found


def oversized(root: Path) -> list[str]:
    too_big, subcommands = [], frozenset(subcommand_functions(root))
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if module in EXEMPT_MODULES:
            continue
        for name, lines, parameters in functions(path, subcommands):
            if name not in EXEMPT_FUNCTIONS and (lines > MAX_LINES or parameters > MAX_PARAMETERS):
                too_big.append(f"{module}:{name} ({lines} lines, {parameters} parameters)")
    return too_big


def test_no_function_is_over_60_lines_or_7_parameters():
    assert oversized(PACKAGE) == []


def test_the_check_finds_a_function_too_long_or_too_wide(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n", encoding="utf-8")
    (tmp_path / "wide.py").write_text("def wide(self, a, b, c, d, e, f, g, h):\n    pass\n", encoding="utf-8")
    assert oversized(tmp_path) == ["long.py:long (62 lines, 0 parameters)", "wide.py:wide (2 lines, 8 parameters)"]


@pytest.mark.parametrize(("pattern", "home"), [
    ("hashlib.sha256(", {"base/digest.py", "serving/server.py"}),  # the server's: an API key's, not a file's
    ("torch.load(", {"base/checkpoint_io.py"}),
    ("pip install", {"base/extras.py"}),
])
def test_what_is_done_once_is_written_once(pattern, home):
    where = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
             if pattern in "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                                     if not line.lstrip().startswith(("#", '"', "'")) and "`" not in line)}
    assert where == home


def duplicates(folder: Path) -> str:
    """pylint's duplicate-code check (make lint's) on a folder, with the project's settings."""
    import subprocess
    import sys

    result = subprocess.run([str(Path(sys.executable).with_name("pylint")), "--rcfile", str(ROOT / "pyproject.toml"),
                             "--score", "n", str(folder)], capture_output=True, text=True, timeout=300)
    return result.stdout


def test_make_lints_clone_check_finds_a_planted_copy(tmp_path):
    """The check can fail: two modules sharing six lines are reported. Its run over src/ is make lint's (CI's
    first step), not repeated here."""
    logic = "\n".join(f"    total = total * {i} + len(name)" for i in range(6))
    for module in ("first", "second"):
        (tmp_path / f"{module}.py").write_text(f"def {module}(name):\n    total = 0\n{logic}\n    return total\n")
    assert "R0801" in duplicates(tmp_path)


# An assert that compares a clock's reading, a duration or a rate with a bound other than 0: it passes or fails with
# the machine's load. Speed is measured by benchmarks, side by side; a timeout that only bounds a hang is no assert.
TIMED = re.compile(r"^\s*assert\b.*(?:monotonic\(\)|perf_counter\(\)|\belapsed\b|\w*seconds\b|\w+_s\b|\w+_s\"\]|"
                   r"per_s\b|per_s\"\])[^\n]*?[<>]=?\s*(?!0\b)[\d(].*$", re.M)
TEST_HELPERS = re.compile(r"^\s*(?:from|import) tests\b.*$", re.M)


def timed_asserts_and_second_imports(tests: Path) -> list[str]:
    """Asserts on elapsed time or a rate, and imports of the test helpers as `tests.<module>` (they are imported as
    `conftest` and `<module>`, the one way pytest's rootdir import puts them on the path)."""
    found = []
    for path in sorted(tests.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {m.group(0).strip()}" for pattern in (TIMED, TEST_HELPERS)
                  for m in pattern.finditer(text)]
    return found


def test_no_test_asserts_on_elapsed_time_and_the_helpers_are_imported_one_way(tmp_path):
    assert timed_asserts_and_second_imports(ROOT / "tests") == []
    (tmp_path / "test_planted.py").write_text("from tests.conftest import ROOT\nassert elapsed < 10\n"
                                              "assert report['names_per_s'] > 40\nassert seconds > 0\n")
    assert timed_asserts_and_second_imports(tmp_path) == [
        "test_planted.py: assert elapsed < 10", "test_planted.py: assert report['names_per_s'] > 40",
        "test_planted.py: from tests.conftest import ROOT"]


# What the run's steps hand each other (the LightningModule, DataModule, Trainer, Calibration): changed through
# their own methods, never by an assignment from outside their class. Lightning's own way for a callback to end a
# fit (trainer.should_stop, as its EarlyStopping does) is the one exception.
BUILT_OBJECTS = {"model", "module", "pl_module", "datamodule", "data", "trainer", "calibration", "summary",
                 "served", "best", "ensemble", "finished"}
ALLOWED_ASSIGNMENTS = {("training/search.py", "trainer.should_stop")}


def assignments_from_outside(root: Path) -> list[str]:
    """`name.attribute = ...` (or name.part.attribute, and augmented) anywhere in the package where name is one of
    BUILT_OBJECTS."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
            for target in (sub for t in targets for sub in ast.walk(t)):
                if not (isinstance(target, ast.Attribute) and isinstance(target.ctx, ast.Store)):
                    continue
                base, chain = target.value, [target.attr]
                while isinstance(base, ast.Attribute):  # model.net.capture = ...: model's
                    base, chain = base.value, [base.attr, *chain]
                name = ".".join([getattr(base, "id", ""), *chain])
                if getattr(base, "id", None) in BUILT_OBJECTS and (module, name) not in ALLOWED_ASSIGNMENTS:
                    found.append(f"{module}:{node.lineno}: {name}")
    return found


def test_no_step_sets_an_attribute_of_what_another_built(tmp_path):
    assert assignments_from_outside(PACKAGE) == []
    planted = tmp_path / "training" / "patch.py"
    planted.parent.mkdir()
    planted.write_text("def patch(datamodule, trainer):\n    datamodule.batch_size = 8\n"
                       "    trainer.gradient_clip_val, x = None, 1\n    model.net.capture = None\n"
                       "    table[model.classes_] = 1\n")
    assert assignments_from_outside(tmp_path) == ["training/patch.py:2: datamodule.batch_size",
                                                  "training/patch.py:3: trainer.gradient_clip_val",
                                                  "training/patch.py:4: model.net.capture"]


def test_the_run_stages_fit_in_one_room():
    """training/ holds the run's stages only: the fit machinery is in fit/, the baselines and margin in
    evaluation/."""
    assert len(list((PACKAGE / "training").glob("*.py"))) <= 16
