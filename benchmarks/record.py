"""A result file for the docs: run a measuring command, keep its figures with the command, the commit, the
machine and the date in docs/results/<name>.json. The docs' tables and sentences are generated from these files
(cog; `make lint` checks they are current), so each figure is typed once, by the command that measured it.

  python -m benchmarks.record default_run --defaults -- python train.py callbacks.progress_bar=null
  python -m benchmarks.record audit_table_corpus -- python -m benchmarks.audit_check --seed 1 2 --json
  python -m benchmarks.record nana -- nameorigin nana-table --fetch --then python train.py experiment=nana
  python -m benchmarks.record nana_baseline --keep accuracy,macro_f1,precision_at,ece,set_coverage,baseline \
      -- nameorigin evaluate outputs/<run>/checkpoints/best.ckpt data/nana/nana.csv --baseline ngram --format json

A training command's figures are its run folder's results.json; any other command's are the JSON it prints.
`--then` chains commands (a table built, then a run on it): each runs once the one before succeeded, and the
figures are the last one's. The seconds are the whole chain's. `--defaults`: the figures are the default model's,
so the default settings are kept with them and the docs fail once one of them changes (benchmarks.defaults).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.defaults import current

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def cpu() -> str:
    """The CPU's model and whether it multiplies bfloat16 natively (AMX, AVX512-BF16), from /proc/cpuinfo."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "CPU"
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    listed = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    flags = set(listed.group(1).split()) if listed else set()
    native = [name for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16")) if flag in flags]
    return f"{model.group(1).strip() if model else 'CPU'} ({', '.join(native) or 'no native bfloat16'})"


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} CPUs, {cpu()}, {platform.system()}, "
            f"Python {platform.python_version()}")


def commit() -> str:
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    # The result files themselves do not count: recording one result must not mark the next as run on changed code.
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)docs/results"], capture_output=True, text=True, check=False).stdout.strip()
    return found.stdout.strip() + ("+changes" if dirty else "") if found.returncode == 0 else "unknown"


def figures_of(stdout: str) -> object:
    """A run's results.json (the folder its last lines name), else the JSON the command printed, else its printed
    text as it is (a command's output the docs show: {"stdout": ...})."""
    runs = re.findall(r"^\s*dashboard\s+tensorboard --logdir (\S+)\s*$", stdout, flags=re.MULTILINE)
    if runs:  # the results block's last line; log lines may follow it
        run = Path(runs[-1])
        figures = json.loads((run / "results.json").read_text())
        if figures.get("model"):  # from the run folder on: no machine's path in a published file
            figures["model"] = str("outputs/<run>" / Path(figures["model"]).resolve().relative_to(run.resolve()))
        return figures
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return {"stdout": stdout}


THEN = "--then"


def steps_of(command: list[str]) -> list[list[str]]:
    """The commands of a chain, split at each --then."""
    steps: list[list[str]] = [[]]
    for part in command:
        if part == THEN:
            steps.append([])
        else:
            steps[-1].append(part)
    return steps


def shown(command: list[str]) -> str:
    """A command as the docs show it: an interpreter by its name, not by a machine's path."""
    return shlex.join(["python" if Path(part).name.startswith("python") else part for part in command])


def kept(figures: object, keys: list[str]) -> object:
    """Only the named top-level figures (a report's per-name vectors are no figure for the docs)."""
    if not keys or not isinstance(figures, dict):
        return figures
    missing = [key for key in keys if key not in figures]
    if missing:
        sys.exit(f"error: --keep {','.join(missing)}: the command printed no such figure")
    return {key: figures[key] for key in keys}


def record(name: str, command: list[str], keep: list[str] | None = None, defaults: bool = False) -> Path:
    measured_at = commit()  # before the run: what the command ran, not what changed while it did
    settings = current() if defaults else None  # benchmarks.defaults: composed before the run, as it ran
    start = time.perf_counter()
    for step in steps_of(command):
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"error: {shlex.join(step)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    seconds = time.perf_counter() - start
    result = {"command": "; ".join(shown(step) for step in steps_of(command)),
              "source": "written by benchmarks.record from the command's output",
              "commit": measured_at, "machine": machine(), "date": datetime.date.today().isoformat(),
              "seconds": round(seconds, 1), "figures": kept(figures_of(done.stdout), keep or [])}
    if keep:
        result["kept"] = keep
    if settings is not None:
        result["defaults"] = settings
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the result file's name, docs/results/<name>.json")
    parser.add_argument("--keep", default="", help="comma-separated top-level figures to keep of the JSON the "
                        "command prints (default: all)")
    parser.add_argument("--defaults", action="store_true", help="the output is the default model's: keep today's "
                        "default settings with it, so the docs fail once one of them changes (benchmarks.defaults)")
    parser.add_argument("command", nargs="*", help="-- then the measuring command")
    argv = sys.argv[1:] if argv is None else argv
    # Everything after the first -- is the command, flags and all; the recorder's own flags come before it.
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    command = [*args.command, *argv[split + 1:]]
    if not all(steps_of(command)) or not re.fullmatch(r"[a-z0-9_]+", args.name):
        parser.error("give a name of lower-case letters, digits and _, then -- and the command")
    print(record(args.name, command, [key for key in args.keep.split(",") if key], args.defaults))
    return 0


if __name__ == "__main__":
    sys.exit(main())
