"""List the runs under a folder (a sweep, or all of outputs/) with their scores, best first.

  nameorigin compare-runs outputs/multirun/2026-11-30/10-00-00.123456
  nameorigin compare-runs outputs --metric hp/test_macro_f1
  nameorigin compare-runs outputs/multirun/2026-11-30/10-00-00.123456 --labels   # per label, pooled

--labels pools every label's test figures over the runs (each run's label_report.json: split seeds, say): its
test names, recall and how often its 90 % prediction sets held it, each kind of set, with Wilson 95 % intervals
over the pooled names.
"""

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from nameorigin.base.errors import UserError
from nameorigin.model.label_report import wilson

METRICS = ("hp/val_acc_best", "hp/test_acc", "hp/test_macro_f1")
# A run with test=false writes no hp/ values (they are written with the test): its validation score is still read.
FALLBACKS = {"hp/val_acc_best": "val/acc_best"}


def pooled_labels(runs: list[Path], min_names: int) -> list[str]:
    """Each label's test figures summed over the runs: successes and names, then one Wilson interval."""
    reports = [{row["label"]: row for row in json.loads((run / "label_report.json").read_text())} for run in runs]
    if any(report.keys() != reports[0].keys() for report in reports):
        raise UserError("the runs' label sets differ: pool runs of one corpus (--labels)")
    first = next(iter(reports[0].values()))
    kinds = [kind for kind in ("marginal", "mondrian") if f"set_coverage_{kind}" in first]
    head = f"{'label':<14} {'names':>6} {'min/run':>7}  {'recall (95 %)':<22}" + "".join(
        f" {kind + ' set holds it':<26}" for kind in kinds)
    lines = [f"{len(runs)} runs pooled; * marks labels with at least {min_names} test names in every run", head]
    for label in reports[0]:
        mine = [report[label] for report in reports]
        names = sum(r["test_names"] for r in mine)
        least = min(r["test_names"] for r in mine)
        cells = []
        for key in ["recall", *(f"set_coverage_{kind}" for kind in kinds)]:
            held = sum(round((r[key] or 0) * r["test_names"]) for r in mine)
            low, high = wilson(held, names)
            cells.append(f"{held / max(names, 1):.3f} [{low:.3f}, {high:.3f}]")
        mark = "*" if least >= min_names else " "
        lines.append(f"{label[:13] + mark:<14} {names:>6} {least:>7}  {cells[0]:<22}"
                     + "".join(f" {cell:<26}" for cell in cells[1:]))
    return lines


def run_scores(run: Path) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    tags = set(events.Tags()["scalars"])
    found = {m: events.Scalars(m)[-1].value for m in METRICS if m in tags}
    for metric, written in FALLBACKS.items():
        if metric not in found and written in tags:
            found[metric] = max(event.value for event in events.Scalars(written))
    return found


def compare_runs(folder: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="a sweep folder or "
                                                        "outputs/: every run folder below it is listed",
                                                        show_default=False)],
                 metric: Annotated[Literal["hp/val_acc_best", "hp/test_acc", "hp/test_macro_f1"],
                                   typer.Option(help="sort key")] = "hp/val_acc_best",
                 labels: Annotated[bool, typer.Option("--labels", help="pool each label's recall and set coverage over "
                                                      "the "
                                                      "runs (their label_report.json)")] = False,
                 min_names: Annotated[int, typer.Option(min=1, help="with --labels: mark the labels with at least "
                                                        "this many test names in every run")] = 20) -> int:
    """The test metrics of several runs or a sweep, side by side, best first; --labels pools each label's."""
    runs = sorted(p.parent for p in folder.glob("**/tensorboard")
                  if (p.parent / ".hydra" / "overrides.yaml").is_file())
    if not runs:
        raise UserError(f"no run folders (tensorboard/ beside .hydra/overrides.yaml) under {folder}")
    if labels:
        reported = [run for run in runs if (run / "label_report.json").is_file()]
        if not reported:
            raise UserError(f"no run under {folder} has a label_report.json: train with test=true")
        print("\n".join(pooled_labels(reported, min_names)))
        return 0
    rows = []
    for run in runs:
        overrides = (run / ".hydra" / "overrides.yaml").read_text().strip().splitlines()
        rows.append((run_scores(run), " ".join(o.lstrip("- ").strip() for o in overrides), run))
    rows.sort(key=lambda row: row[0].get(metric, float("-inf")), reverse=True)
    print(f"{'val_acc_best':>12} {'test_acc':>9} {'test_f1':>8}  overrides / run")
    for scores, overrides, run in rows:
        cells = [f"{scores[m]:.4f}" if m in scores else "-" for m in METRICS]
        print(f"{cells[0]:>12} {cells[1]:>9} {cells[2]:>8}  {overrides or '(defaults)'}\n{'':>32}{run}")
    return 0
