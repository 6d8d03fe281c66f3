"""MODEL_CARD.md: what a trained model is, what it was trained and tested on, how far to trust it, and how to
reproduce it. Written into the run folder and embedded in the best checkpoint (`nameorigin card CKPT`)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nameorigin.base.atomic import write_atomically
from nameorigin.data.batching import is_refit
from nameorigin.evaluation.margin import margin_line
from nameorigin.model.artifacts import Calibration
from nameorigin.model.label_report import report_table, weakest_line
from nameorigin.training import linear_mix
from nameorigin.training.card_sections import (
    LARGE_TABLE,
    LIMITS,
    TABLE_LIMITS,
    ensemble_lines,
    fitted_on_lines,
    folder_source,
    in_pretrain,
    label_source,
    name_source,
    people_weight,
    percent,
    picked_lines,
    plural,
    search_lines,
    set_rows,
    transfer_lines,
)


def reproduce_command() -> str:
    """`python train.py` with the overrides of this run, when Hydra started it."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # not under @hydra.main (a test calling the pipeline)
        overrides = []
    return " ".join(["python train.py", *map(shlex.quote, overrides)])


@dataclass
class Run:
    """What the card's sections read: the checkpoint, the run's metrics and split manifest, and what follows from
    them (refitted or not, a user's table or the corpus, the word for a label)."""

    checkpoint: dict
    metrics: dict[str, Any]
    manifest: dict
    picks: list
    label_rows: list[dict] | None

    def __post_init__(self) -> None:
        hp = self.checkpoint["hyper_parameters"]
        self.data = self.checkpoint.get("data") or {}
        self.model, self.transfer, self.labels = hp["config"], hp.get("transfer") or {}, hp["labels"]
        self.calibration = Calibration.from_plain(self.checkpoint.get("calibration"))
        self.refitted = is_refit(self.data)
        self.label = self.data.get("label_name", "language")
        self.table = "path" in self.manifest  # trained on a user's table, not the tutorial corpus' files
        columns = self.manifest["columns"] if self.table else {}
        self.shares = self.table and bool(columns.get("share_columns") or columns.get("rows") == "people")
        self.large = self.manifest.get("sizes", {}).get("train", 0) > LARGE_TABLE
        self.word = self.label if self.table else "language"


def model_section(run: Run) -> list[str]:
    model, calibration, transfer = run.model, run.calibration, run.transfer
    fitted = "fitted on validation for best.ckpt and carried over" if run.refitted else "fitted on validation"
    ngram = f"hashed 1-{model['ngram_max']}-gram head ({model['ngram_buckets']} buckets)" \
        if model["ngram_buckets"] else "no n-gram head"
    what = ("language-of-origin classifier", "the language of origin of a surname", "languages") if not run.table \
        else (f"name classifier ({run.label})", f"the {run.label} of a name", f"{run.label} labels")
    return [
        f"# Model card: nameorigin {model['cell'].upper()} {what[0]}", "",
        f"Predicts {what[1]} among {len(run.labels)} {what[2]}: {', '.join(run.labels)}.", "",
        "## Model",
        f"- One {model['cell']} cell (hidden {model['hidden_size']}, embedding {model['embedding_dim'] or 'one-hot'}) "
        f"applied to every character with shared weights, a linear head on the last state, and {ngram}.",
        f"- Decision layer: logit adjustment tau = {model['logit_adjustment']:g} against the training prior; "
        + (f"temperature {calibration.temperature:.3f} {fitted}" if calibration else
           "no temperature scaling (trained with calibration.enabled=false)")
        + (" (at the end of its search range: validation gave too little to calibrate on, no errors or hardly a "
           "right answer, so treat the probabilities as rough)."
           if calibration and calibration.temperature_at_bound else "."),
        *([f"- Fine-tuned from `{model['init_from']}` (the names-dataset pretraining): its embedding and cell start "
           "this model" + ("; its country distribution is an input of the language head"
                      if transfer.get("source_classes") else "")
           + (f"; the exact name's country shares are evidence when names-dataset holds the name "
              f"({transfer['known_names']:,} names" + (f", through a hidden layer of {model['evidence_hidden']}"
                                                         if model["evidence_hidden"] else "") + ")"
              if transfer.get("known_names") else "") + "."]
          if model["init_from"] else []),
        *transfer_lines(run.metrics),
        *ensemble_lines(run.metrics),
        *([f"- Two parts: the n-gram head fitted alone as an L2-regularized linear model, and the network (the "
           f"recurrent cell with its own n-gram head), mixed at the weight validation picked; "
           f"{linear_mix.describe(run.checkpoint['linear_part'])}"
           + (". The refit fitted its linear part again on train + validation with that penalty and weight."
              if run.refitted else ".")] if run.checkpoint.get("linear_part") else []),
        "- Settings (`model.*`, as stored in the checkpoint): "
        + ", ".join(f"{key}={value}" for key, value in model.items() if key not in ("optimizer", "scheduler")) + ".",
        *picked_lines(run.picks),
    ]


def data_section(run: Run) -> list[str]:
    manifest, data = run.manifest, run.data
    join = (run.checkpoint["hyper_parameters"]["config"].get("name_parts") or {}).get("join")
    person = " (a name's parts in either order count as one name)" if join else ""
    return [
        "",
        "## Data and provenance",
        (f"- Corpus: the table `{manifest['path']}` ({name_source(manifest['columns'], manifest.get('rows'), join)}, "
         f"{label_source(manifest['columns'])}; rows read and skipped: {manifest.get('rows')}), "
         if run.table else
         f"- Corpus: `{manifest.get('root', '?')}` ({folder_source(manifest.get('root'))}), ")
        + f"sha256 `{data.get('corpus_sha256', manifest.get('corpus_sha256', '?'))}`.",
        f"- Normalization: `{data.get('normalize', run.model['normalize'])}`. "
        + ("A name's rows pooled into one; " if run.shares else f"Duplicate (name, {run.word}) pairs dropped; ")
        + "the split is by name string (a name is in exactly one of train/val/test, and so are spellings of it that "
        f"differ only in case or punctuation){person}, stratified by {'majority ' if run.shares else ''}{run.word}.",
        f"- Split seed {data.get('split_seed')}, fractions {data.get('split_fractions')}, sizes "
        f"{manifest.get('sizes', {})}; every name is listed in the run's `split.json`.",
        *([f"- Trained on train + validation ({sum(manifest.get('sizes', {}).get(k, 0) for k in ('train', 'val'))} "
           "pairs), a refit with the same settings and epochs after validation picked `best.ckpt` (trained on train "
           "alone) and fitted the temperature and prediction-set thresholds; neither stage saw the test split."]
          if run.refitted else []),
    ]


def pretrain_line(metrics: dict[str, Any], manifest: dict) -> str:
    """How many test names the starting point's table holds whole, and the accuracy on those and on the rest
    (on the rest alone when it holds none: an empty subset has no accuracy)."""
    found = (f"{in_pretrain(metrics, manifest)} test names are found whole in names-dataset, whose names the "
             "starting point learnt from and looks up (less the runs' held-out names its pretraining left out, "
             "docs/pretraining.md)")
    rest = (f"accuracy {percent(metrics['test/acc_not_in_pretrain'])}, macro-F1 "
            f"{metrics['test/macro_f1_not_in_pretrain']:.3f}")
    if not metrics["test/share_in_pretrain"]:
        return f"- {found}; on all of them: {rest}."
    return (f"- {found}: accuracy {percent(metrics['test/acc_in_pretrain'])}, macro-F1 "
            f"{metrics['test/macro_f1_in_pretrain']:.3f}; not found: {rest}.")


def test_section(run: Run) -> list[str]:
    metrics, label, word, checkpoint = run.metrics, run.label, run.word, run.checkpoint
    root = run.manifest.get("root", "DIR")
    return [
        "",
        "## Test metrics (held-out split, read once after training)",
        (f"- Accuracy {percent(metrics.get('test/acc'))} against each name's majority {label}; log-loss against "
         f"the shares {metrics.get('test/loss', float('nan')):.4f}"
         if run.shares else
         f"- Accuracy {percent(metrics.get('test/acc'))} (counting any of a name's {plural(word)} as right: "
         f"{percent(metrics.get('test/acc_any'))})")
        + (f"; over people ({people_weight(run.manifest['columns'])}) "
           f"{percent(metrics['test/acc_weighted'])}" if "test/acc_weighted" in metrics else "")
        + f"; macro-F1 {metrics.get('test/macro_f1', float('nan')):.3f}.",
        *([pretrain_line(metrics, run.manifest)] if "test/acc_in_pretrain" in metrics else []),
        *([f"- {weakest_line(run.label_rows, label)} Every {label}'s figures with their intervals: below."]
          if run.label_rows and weakest_line(run.label_rows, label) else []),
        *([f"- **Margin over the n-gram baseline** on these test names: {margin_line(checkpoint['margin'])}; "
           f"exact McNemar p = {checkpoint['margin']['p']:.3g}."] if checkpoint.get("margin") else []),
        ("- The reference on this same split is the project's own linear model over hashed character 1-4-grams "
         f"(the model's linear part alone): `nameorigin evaluate CKPT {root} --baseline ngram` fits it "
         "(its penalty chosen on " if run.large else
         "- The reference on this same split is a logistic regression over character 1-4-grams: "
         f"`nameorigin evaluate CKPT {root} --baseline lr` fits it (C chosen on ")
        + f"validation{', then refitted on train + validation as this model was' if run.refitted else ''}) and "
        "compares the two on the same test names, with a paired bootstrap interval.", "",
    ]


def labels_section(run: Run) -> list[str]:
    label = run.label
    if run.label_rows:
        return [f"### Every {label}", "",
                "Each figure with its 95 % interval: Wilson for precision, recall and set coverage, a bootstrap "
                "over the test names for F1. ECE (one vs rest): the calibration error of the label's own "
                "probability. With few test names the intervals are wide: read them before the figures.", "",
                *report_table(run.label_rows, label)]
    counts = run.manifest.get("counts", {})
    lines = [f"| {label} | test names | F1 |", "|---|---|---|"]
    for each in run.labels:
        f1 = run.metrics.get(f"test_f1/{each}")
        lines.append(f"| {each} | {counts.get('test', {}).get(each, 0)} | {'n/a' if f1 is None else f'{f1:.3f}'} |")
    return lines


def calibration_section(run: Run) -> list[str]:
    calibration, metrics = run.calibration, run.metrics
    if not calibration:
        return ["", "## Calibration",
                "Off for this run (calibration.enabled=false): the probabilities are the raw softmax, with test "
                f"expected calibration error {metrics.get('test/ece_raw', float('nan')):.4f}, and there are no "
                "prediction sets."]
    return ["", "## Calibration (expected calibration error, 15 bins; lower is better)",
            "| split | before temperature scaling | after |", "|---|---|---|",
            f"| validation ({'fitted for best.ckpt' if run.refitted else 'fitted here'}) | "
            f"{calibration.val_ece_raw:.4f} | {calibration.val_ece:.4f} |",
            f"| test | {metrics.get('test/ece_raw', float('nan')):.4f} | "
            f"{metrics.get('test/ece', float('nan')):.4f} |",
            *([f"| test, against the shares (over people) | | {metrics['test/ece_shares']:.4f} |",
               "", f"Against each name's majority {run.label}; the temperature minimizes the validation "
               "cross-entropy against the shares, which is what the probabilities mean."]
              if "test/ece_shares" in metrics else []),
            *sets_section(run), *abstention_section(run), *fitted_on_lines(calibration, run.refitted)]


def sets_section(run: Run) -> list[str]:
    calibration = run.calibration
    lines = ["", "## Prediction sets (split conformal, thresholds from validation)",
             "`nameorigin predict CKPT --coverage C` returns the smallest set of languages holding the true one "
             "with probability C."
             + (" This model also trained on the validation names, so that is no longer guaranteed: the test "
                "column measures it." if run.refitted else ""), "",
             "Marginal sets hold the true label that often over all test names; class-conditional "
             "(Mondrian) sets, a threshold per label, hold it that often within each label "
             f"(`calibration.sets`; this model serves {calibration.sets} sets).", "",
             "| coverage asked | sets | probability threshold | test coverage | mean set size |",
             "|---|---|---|---|---|"]
    for level in calibration.conformal:
        lines += set_rows(calibration, level, run.metrics)
    return lines


def abstention_section(run: Run) -> list[str]:
    rule = run.calibration.abstention
    if not rule:
        return []
    return ["", "## Abstention (names out of the model's depth)",
            f"A name abstains, its scores still given, when more than {rule.max_unknown_share:.0%} of its "
            "characters were never in training, or when its letters are unlike the training names' and no "
            "label's evidence is strong (trigram novelty plus the energy of the logits, standardized; "
            f"threshold {rule.threshold:.3f}, set to abstain on {rule.false_abstention:.0%} of the "
            f"validation names{' for best.ckpt and carried over' if run.refitted else ''}). Validation: "
            f"{percent(rule.val_abstained)}; test: {percent(run.metrics.get('test/abstained'))}."]


def closing_section(run: Run, command: str) -> list[str]:
    columns = run.manifest["columns"] if run.table else {}
    limits = LIMITS if not run.table else TABLE_LIMITS.format(
        path=run.manifest["path"], label=run.label,
        column=", ".join(columns.get("share_columns") or [columns["label_column"]]))
    return [*search_lines(run.checkpoint.get("search") or []),
            "", "## Intended use and limits", limits, "", "## Reproduce", "```bash", command, "```", ""]


def render(checkpoint: dict, metrics: dict[str, Any], manifest: dict, command: str,
           picks: list | None = None, label_rows: list[dict] | None = None) -> str:
    """The card's Markdown, a section at a time; `label_rows`: the test split's per-label report
    (nameorigin.model.label_report)."""
    run = Run(checkpoint, metrics, manifest, picks or [], label_rows)
    sections = (model_section(run), data_section(run), test_section(run), labels_section(run),
                calibration_section(run), closing_section(run, command))
    return "\n".join(line for section in sections for line in section)


def write_model_card(output_dir: Path, checkpoint: dict, metrics: dict[str, Any], picks: list | None = None,
                     label_rows: list[dict] | None = None) -> str:
    """Render the card from the served checkpoint (as it will be written) and the run's metrics; write
    MODEL_CARD.md and return its text, which the checkpoint embeds."""
    manifest_path = Path(output_dir) / "split.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    text = render(checkpoint, metrics, manifest, reproduce_command(), picks, label_rows)
    path = Path(output_dir) / "MODEL_CARD.md"
    write_atomically(path, lambda p: p.write_text(text, encoding="utf-8"))
    return text
