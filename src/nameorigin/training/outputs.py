"""What a run leaves once its steps are done: the served checkpoints, each written once, the per-label report, the
model card, the published starting point, results.json, and the results block printed last."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nameorigin.base.atomic import write_atomically
from nameorigin.config import OBJECTIVES
from nameorigin.evaluation.margin import margin_line
from nameorigin.fit.checkpointing import Served
from nameorigin.fit.module import NameClassifier
from nameorigin.fit.timing import time_line
from nameorigin.model.artifacts import PUBLISHED_CORPUS_KEY, RESULTS_FILE, STARTING_POINT_KEY
from nameorigin.training import search, transfer
from nameorigin.training.card import write_model_card
from nameorigin.training.card_sections import ensemble_summary
from nameorigin.training.plan import RunPlan


@dataclass(frozen=True)
class ServedFiles:
    """The checkpoints a run serves, not yet written: best.ckpt (trained on train, picked on validation) and, when
    the run refits, refit.ckpt (trained on train + validation). The tested one is the refit's where there is one."""

    best: Served | None = None
    refit: Served | None = None

    @property
    def tested(self) -> Served | None:
        return self.refit or self.best

    def all(self) -> list[Served]:
        return [served for served in (self.best, self.refit) if served is not None]


@dataclass(frozen=True)
class RunChecks:
    """What results.json keeps beside the metrics: the margin over the n-gram linear model, the gradient check's
    summary of the first training, and what became of the candidate from the starting point (each None if none)."""

    margin: dict | None = None
    gradient_check: dict | None = None
    transfer: dict | None = None


def write_outputs(plan: RunPlan, output_dir: Path, served: ServedFiles, model: NameClassifier, metrics: dict,
                  checks: RunChecks) -> None:
    """What the run leaves in `output_dir`: the served checkpoints, each written once where the plan put them (the
    tested one with the search's candidates, the margin and the model card), the per-label report, the card, the
    published starting point and results.json (`report` prints the results block after it). `model`: the one
    tested."""
    settings, final = plan.settings, served.tested
    if model.label_report is not None:  # the test split's per-label report, beside the card
        write_atomically(output_dir / "label_report.json",
                         lambda path: path.write_text(json.dumps(model.label_report, indent=1)))
    if final:
        if plan.candidates:  # the card lists them
            final.checkpoint["search"] = search.plain(plan.candidates)
        if checks.margin:
            final.checkpoint["margin"] = checks.margin
        if settings.card.enabled:  # rendered from the checkpoint as it is written
            final.checkpoint["model_card"] = write_model_card(output_dir, final.checkpoint, metrics, plan.picks,
                                                              model.label_report)
    for checkpoint in served.all():
        checkpoint.write()
    published = {}
    if settings.transfer.publish and final:
        transfer.publish(final.path, settings.transfer.publish)
        published[STARTING_POINT_KEY] = settings.transfer.publish
        published[PUBLISHED_CORPUS_KEY] = (final.checkpoint.get("data") or {}).get("corpus_sha256")
    figures = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    write_atomically(output_dir / RESULTS_FILE, lambda path: path.write_text(  # what benchmarks.record reads
        json.dumps({"metrics": figures, "model": final.path if final else None, **published,
                    "margin": checks.margin, "gradient_check": checks.gradient_check, "transfer": checks.transfer},
                   indent=1, default=float)))


def report(metrics: dict[str, Any], output_dir: Path, margin: dict | None = None,
           transfer_note: dict | None = None) -> None:
    """Where things are, printed last so it is the first thing a user sees."""
    shown = {k: v for k, v in metrics.items() if k.startswith(("test/", "val/acc_best")) and "_f1/" not in k
             and not k.endswith(("_marginal", "_mondrian"))}  # each kind of set: in the model card
    lines = [f"  {k:<16} {v:.4f}" for k, v in sorted(shown.items())]
    if margin:
        lines.append(f"  margin           {margin_line(margin)}")
    final, best = metrics.get("model_checkpoint"), metrics.get("best_checkpoint")
    if final and final != best:
        lines.append(f"  model            {final}  (refit on train + validation; the one tested)")
    scores = transfer.compared(metrics)
    if scores:
        kept = "the model from the names-dataset starting point" if metrics["transfer/chosen"] else "the plain model"
        objective, plain_score, transferred_score = scores
        on = "" if objective == "val/acc" else f"{OBJECTIVES[objective]} "
        lines.append(f"  transfer         validation kept {kept} ({on}{transferred_score:.4f} from the starting "
                     f"point, {plain_score:.4f} plain)")
    transfer_note = transfer_note or {}
    if transfer_note.get("differences"):
        lines.append(f"  candidates       differ in {'; '.join(transfer_note['differences'])}")
    if transfer_note.get("refused"):
        lines.append(f"  transfer         the candidate from the starting point was refused, the plain model served: "
                     f"{transfer_note['refused']}")
    if "ensemble/members" in metrics:
        lines.append(f"  ensemble         {ensemble_summary(metrics)}")
    if time_line(metrics):
        lines.append(f"  time             {time_line(metrics)}")
    if best:
        picked = "  (trained on train, picked on validation)" if final != best else ""
        lines.append(f"  best checkpoint  {best}{picked}")
    lines.append(f"  dashboard        tensorboard --logdir {output_dir}")
    print("\n".join(["results:", *lines]), flush=True)
