"""What a run leaves once its steps are done: the served checkpoints, each written once, the per-label report, the
model card, the published starting point, results.json, and the results block printed last."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from nameorigin.base.atomic import write_atomically
from nameorigin.evaluation.margin import margin_line
from nameorigin.fit.checkpointing import Served
from nameorigin.fit.module import NameClassifier
from nameorigin.fit.timing import time_line
from nameorigin.model.artifacts import RESULTS_FILE, STARTING_POINT_KEY
from nameorigin.training import search, transfer
from nameorigin.training.card import write_model_card
from nameorigin.training.card_sections import ensemble_summary


def write_outputs(cfg: DictConfig, served: list[Served], model: NameClassifier, metrics: dict, picks: list,
                  candidates: list, checks: dict) -> None:
    """What the run leaves: the served checkpoints, each written once (the tested one with the search's
    candidates, the margin and the model card), the per-label report, the card, the published starting point and
    results.json (`report` prints the results block after it). `checks`: the margin (or None) and the gradient
    check's summary of the first training (or None), which results.json keeps beside the metrics."""
    margin = checks["margin"]
    output_dir = Path(cfg.paths.output_dir)
    if model.label_report is not None:  # the test split's per-label report, beside the card
        write_atomically(output_dir / "label_report.json",
                         lambda path: path.write_text(json.dumps(model.label_report, indent=1)))
    final = served[-1] if served else None
    if final:
        if candidates:  # the card lists them
            final.checkpoint["search"] = search.plain(candidates)
        if margin:
            final.checkpoint["margin"] = margin
        if cfg.card.enabled:  # rendered from the checkpoint as it is written
            final.checkpoint["model_card"] = write_model_card(output_dir, final.checkpoint, metrics, picks,
                                                              model.label_report)
    for checkpoint in served:
        checkpoint.write()
    published = {}
    if cfg.transfer.publish and final:
        transfer.publish(final.path, cfg.transfer.publish)
        published[STARTING_POINT_KEY] = cfg.transfer.publish
    figures = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    write_atomically(output_dir / RESULTS_FILE, lambda path: path.write_text(  # what benchmarks.record reads
        json.dumps({"metrics": figures, "model": final.path if final else None, **published, **checks}, indent=1,
                   default=float)))


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
    if "transfer/chosen" in metrics:
        kept = "the model from the surnames starting point" if metrics["transfer/chosen"] else "the plain model"
        lines.append(f"  transfer         validation kept {kept} ({metrics['transfer/val_acc_transferred']:.4f} "
                     f"from the starting point, {metrics['transfer/val_acc_plain']:.4f} plain)")
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
