"""MODEL_CARD.md: what a trained model is, what it was trained and tested on, how far to trust it, and how to
reproduce it. Written into the run folder and embedded in the best checkpoint (`scripts/predict.py CKPT --card`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from nameorigin.base.atomic import write_atomically
from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.data.batching import is_refit
from nameorigin.data.names import shipped_corpus
from nameorigin.model.artifacts import Calibration
from nameorigin.model.label_report import report_table, weakest_line
from nameorigin.training import linear_part
from nameorigin.training.checkpointing import update_checkpoint
from nameorigin.training.margin import margin_line
from nameorigin.training.search import shown_settings
from nameorigin.training.sizing import describe

LIMITS = """\
- A name's language of origin is **not** a person's ethnicity, nationality, citizenship or the language they
  speak. Names travel through marriage, migration, adoption and transliteration; use the output to study names,
  never to make decisions about people.
- The labels are the 18 files of the PyTorch tutorial corpus, a convenience sample: English.txt is a catch-all,
  many names sit under several languages, and some languages have fewer than 100 names. Scores are weakest on
  the rare languages (see the per-language table) and on names whose spelling several languages share.
- Names are folded to ASCII unless the run says otherwise; names in other scripts get no prediction.
- Probabilities are calibrated on the validation split of this corpus only; on other populations of names
  (another country's phone book, say) both accuracy and calibration will differ. Prediction sets keep their
  stated coverage only for names drawn like the validation names."""


TABLE_LIMITS = """\
- A name's {label} in `{path}` (columns `{column}`) is what the model learns: it says nothing certain about a
  person's ethnicity, nationality or citizenship. Use the output to study names, never to make decisions about
  people.
- Scores are weakest on the rarest labels (see the per-label table) and on names several labels share.
- Names are folded to ASCII unless the run says otherwise; names in other scripts get no prediction.
- Probabilities are calibrated on the validation split of this table only; on other populations of names both
  accuracy and calibration will differ. Prediction sets keep their stated coverage only for names drawn like the
  validation names."""



def folder_source(root: str | None) -> str:
    """What a folder corpus is: the shipped tutorial names, or the user's own folder of <Language>.txt files."""
    if root is not None and Path(root).resolve() == shipped_corpus().resolve():
        return "the PyTorch tutorial names shipped with the package, https://download.pytorch.org/tutorial/data.zip"
    return "a folder of <Language>.txt files, one name per line"

def reproduce_command() -> str:
    """`python train.py` with the overrides of this run, when Hydra started it."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # not under @hydra.main (a test calling the pipeline)
        overrides = []
    return " ".join(["python train.py", *map(shlex.quote, overrides)])


LARGE_TABLE = 200_000  # training pairs past which the card points at the SGD baseline: the LR grid takes hours


def plural(word: str) -> str:
    return f"{word[:-1]}ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else f"{word}s"


def percent(value: Any) -> str:
    return "n/a" if value is None else f"{100 * float(value):.1f} %"


def label_source(columns: dict) -> str:
    """Where a table's labels came from: a label column, or share columns (and a weight column)."""
    if columns.get("rows") == "people":
        return (f"a row per person: each name's share of its people under each label of `{columns['label_column']}`, "
                "scored under the majority label, each name weighted in the training loss by its people")
    if columns.get("share_columns"):
        source = (f"each label's share from columns {', '.join(f'`{c}`' for c in columns['share_columns'])}, "
                  "scored under the majority label")
    else:
        source = f"labels from `{columns['label_column']}`"
    weight = columns.get("weight_column")
    return source + (f", each row weighted in the training loss by `{weight}`" if weight else "")


def set_rows(calibration: Calibration, level: str, metrics: dict[str, Any]) -> list[str]:
    """The prediction-set table's rows of one level: each kind of set fitted, the served one marked."""
    name, rows = f"{float(level) * 100:g}", []
    for kind in calibration.set_kinds(level):
        threshold = calibration.threshold(level, kind)
        shown = f"{threshold:.4f}" if isinstance(threshold, float) else \
            f"{min(threshold):.4f} to {max(threshold):.4f}, per label"
        fallback = len(calibration.conformal_fallback.get(level, [])) if kind == "mondrian" else 0
        served = " (served)" if kind == calibration.sets else ""
        rows.append(f"| {level} | {'class-conditional' if kind == 'mondrian' else kind}{served}"
                    + (f", {fallback} labels too rare: marginal" if fallback else "") + f" | {shown} | "
                    f"{percent(metrics.get(f'test/coverage_{name}_{kind}'))} | "
                    f"{metrics.get(f'test/set_size_{name}_{kind}', float('nan')):.2f} |")
    return rows


def people_weight(columns: dict) -> str:
    return "each name counted once per row" if columns.get("rows") == "people" else \
        f"weighted by `{columns['weight_column']}`"


def picked_lines(picks: list) -> list[str]:
    """The card's account of the settings the data picked (nameorigin.training.sizing)."""
    return [f"- Picked from the data, which the run left them to (docs/configuration.md, \"Settings that fit the "
            f"data\"): {describe(picks)}."] if picks else []


def search_lines(candidates: list[dict]) -> list[str]:
    """The card's table of the candidates the search tried (nameorigin.training.search)."""
    if not candidates:
        return []
    rows = []
    for c in candidates:
        acc = "n/a" if c["val_acc"] is None else f"{c['val_acc']:.4f}"
        rows.append(f"| {c['number']} | {acc} | {c['epochs']:g} | {c['seconds']:.0f} | {c['state']} | "
                    f"{shown_settings(c['settings'])} |")
    return ["", "## Settings searched on validation",
            "Candidate 0 is the rule's settings; a candidate stopped early (pruned, or at the budget) cannot be "
            "picked. The pick is the finished candidate with the best validation accuracy.", "",
            "| candidate | val acc | epochs | seconds | state | settings |", "|---|---|---|---|---|---|", *rows]


def fitted_on_lines(calibration: Calibration, refitted: bool) -> list[str]:
    """Which names fitted each part this model carries, and whether the model trained on them."""
    parts = [("Temperature and prediction-set thresholds", calibration.fitted_on),
             ("Abstention rule", calibration.abstention.fitted_on if calibration.abstention else ""),
             ("`--composition`'s confusion reference",
              f"{calibration.reference.fitted_on} ({len(calibration.reference.targets):,} of its "
              f"{calibration.reference.held_out:,} names kept)" if calibration.reference else "")]
    lines = [f"- {part}: {names}." for part, names in parts if names]
    if not lines:
        return []
    why = (" This model trained on the validation names too; none of these parts was fitted on its own answers "
           "there, and the test split measures how well they carry.") if refitted else ""
    return ["", "## What fitted each part", *lines, *([why.strip()] if why else [])]


def render(checkpoint: dict, metrics: dict[str, Any], manifest: dict, command: str,
           picks: list | None = None, label_rows: list[dict] | None = None) -> str:
    """The card's Markdown; `label_rows`: the test split's per-label report (nameorigin.model.label_report)."""
    hp, data = checkpoint["hyper_parameters"], checkpoint.get("data") or {}
    model, transfer = hp["config"], hp.get("transfer") or {}
    calibration = Calibration.from_plain(checkpoint.get("calibration"))
    refitted = is_refit(data)
    fitted = "fitted on validation for best.ckpt and carried over" if refitted else "fitted on validation"
    labels, counts = hp["labels"], manifest.get("counts", {})
    ngram = f"hashed 1-{model['ngram_max']}-gram head ({model['ngram_buckets']} buckets)" \
        if model["ngram_buckets"] else "no n-gram head"
    label = data.get("label_name", "language")
    table = "path" in manifest  # trained on a user's table, not the tutorial corpus' files
    shares = table and bool(manifest["columns"].get("share_columns") or manifest["columns"].get("rows") == "people")
    large = manifest.get("sizes", {}).get("train", 0) > LARGE_TABLE
    word = label if table else "language"
    what = ("language-of-origin classifier", "the language of origin of a surname", "languages") if not table \
        else (f"name classifier ({label})", f"the {label} of a name", f"{label} labels")
    lines = [
        f"# Model card: nameorigin {model['cell'].upper()} {what[0]}", "",
        f"Predicts {what[1]} among {len(labels)} {what[2]}: {', '.join(labels)}.", "",
        "## Model",
        f"- One {model['cell']} cell (hidden {model['hidden_size']}, embedding {model['embedding_dim'] or 'one-hot'}) "
        f"applied to every character with shared weights, a linear head on the last state, and {ngram}.",
        f"- Decision layer: logit adjustment tau = {model['logit_adjustment']:g} against the training prior; "
        + (f"temperature {calibration.temperature:.3f} {fitted}" if calibration else
           "no temperature scaling (trained with calibration.enabled=false)")
        + (" (at the end of its search range: validation gave too little to calibrate on, no errors or hardly a "
           "right answer, so treat the probabilities as rough)."
           if calibration and calibration.temperature_at_bound else "."),
        *([f"- Fine-tuned from `{model['init_from']}` (surnames pretraining): its embedding and cell start this "
           "model" + ("; its country distribution is an input of the language head"
                      if transfer.get("source_classes") else "")
           + (f"; the exact name's country shares are evidence when names-dataset holds the name "
              f"({transfer['known_names']:,} surnames" + (f", through a hidden layer of {model['evidence_hidden']}"
                                                         if model["evidence_hidden"] else "") + ")"
              if transfer.get("known_names") else "") + "."]
          if model["init_from"] else []),
        *([f"- Two parts: the n-gram head fitted alone as an L2-regularized linear model, and the network (the "
           f"recurrent cell with its own n-gram head), mixed at the weight validation picked; "
           f"{linear_part.describe(checkpoint['linear_part'])}"
           + (". The refit fitted its linear part again on train + validation with that penalty and weight."
              if refitted else ".")] if checkpoint.get("linear_part") else []),
        "- Settings (`model.*`, as stored in the checkpoint): "
        + ", ".join(f"{key}={value}" for key, value in model.items() if key not in ("optimizer", "scheduler")) + ".",
        *picked_lines(picks or []),
        "",
        "## Data and provenance",
        (f"- Corpus: the table `{manifest['path']}` (names from column `{manifest['columns']['name_column']}`, "
         f"{label_source(manifest['columns'])}; rows read and skipped: {manifest.get('rows')}), "
         if "path" in manifest else
         f"- Corpus: `{manifest.get('root', '?')}` ({folder_source(manifest.get('root'))}), ")
        + f"sha256 `{data.get('corpus_sha256', manifest.get('corpus_sha256', '?'))}`.",
        f"- Normalization: `{data.get('normalize', model['normalize'])}`. "
        + ("A name's rows pooled into one; " if shares else f"Duplicate (name, {word}) pairs dropped; ")
        + "the split is by name string (a name is in exactly one of train/val/test, and so are spellings of it that "
        f"differ only in case or punctuation), stratified by {'majority ' if shares else ''}{word}.",
        f"- Split seed {data.get('split_seed')}, fractions {data.get('split_fractions')}, sizes "
        f"{manifest.get('sizes', {})}; every name is listed in the run's `split.json`.",
        *([f"- Trained on train + validation ({sum(manifest.get('sizes', {}).get(k, 0) for k in ('train', 'val'))} "
           "pairs), a refit with the same settings and epochs after validation picked `best.ckpt` (trained on train "
           "alone) and fitted the temperature and prediction-set thresholds; neither stage saw the test split."]
          if refitted else []), "",
        "## Test metrics (held-out split, read once after training)",
        (f"- Accuracy {percent(metrics.get('test/acc'))} against each name's majority {label}; log-loss against "
         f"the shares {metrics.get('test/loss', float('nan')):.4f}"
         if shares else
         f"- Accuracy {percent(metrics.get('test/acc'))} (counting any of a name's {plural(word)} as right: "
         f"{percent(metrics.get('test/acc_any'))})")
        + (f"; over people ({people_weight(manifest['columns'])}) "
           f"{percent(metrics['test/acc_weighted'])}" if "test/acc_weighted" in metrics else "")
        + f"; macro-F1 {metrics.get('test/macro_f1', float('nan')):.3f}.",
        *([f"- Test names found in names-dataset: accuracy {percent(metrics['test/acc_in_pretrain'])}, macro-F1 "
           f"{metrics['test/macro_f1_in_pretrain']:.3f}; not found: accuracy "
           f"{percent(metrics['test/acc_not_in_pretrain'])}, macro-F1 {metrics['test/macro_f1_not_in_pretrain']:.3f}."]
          if "test/acc_in_pretrain" in metrics else []),
        *([f"- {weakest_line(label_rows, label)} Every {label}'s figures with their intervals: below."]
          if label_rows and weakest_line(label_rows, label) else []),
        *([f"- **Margin over the n-gram baseline** on these test names: {margin_line(checkpoint['margin'])}; "
           f"exact McNemar p = {checkpoint['margin']['p']:.3g}."] if checkpoint.get("margin") else []),
        ("- The reference on this same split is a logistic regression over hashed character 1-4-grams fitted by "
         f"SGD: `python scripts/predict.py CKPT --evaluate {manifest.get('root', 'DIR')} --baseline sgd` fits it "
         "(alpha chosen on " if large else
         "- The reference on this same split is a logistic regression over character 1-4-grams: "
         f"`python scripts/predict.py CKPT --evaluate {manifest.get('root', 'DIR')} --baseline` fits it (C chosen on ")
        + f"validation{', then refitted on train + validation as this model was' if refitted else ''}) and compares "
        "the two on the same test names, with a paired bootstrap interval.", "",
    ]
    if label_rows:
        lines += [f"### Every {label}", "",
                  "Each figure with its 95 % interval: Wilson for precision, recall and set coverage, a bootstrap "
                  "over the test names for F1. ECE (one vs rest): the calibration error of the label's own "
                  "probability. With few test names the intervals are wide: read them before the figures.", "",
                  *report_table(label_rows, label)]
    else:
        lines += [f"| {label} | test names | F1 |", "|---|---|---|"]
        for each in labels:
            f1 = metrics.get(f"test_f1/{each}")
            lines.append(f"| {each} | {counts.get('test', {}).get(each, 0)} | "
                         f"{'n/a' if f1 is None else f'{f1:.3f}'} |")
    if not calibration:
        lines += ["", "## Calibration",
                  "Off for this run (calibration.enabled=false): the probabilities are the raw softmax, with test "
                  f"expected calibration error {metrics.get('test/ece_raw', float('nan')):.4f}, and there are no "
                  "prediction sets."]
    else:
        lines += ["", "## Calibration (expected calibration error, 15 bins; lower is better)",
                  "| split | before temperature scaling | after |", "|---|---|---|",
                  f"| validation ({'fitted for best.ckpt' if refitted else 'fitted here'}) | "
                  f"{calibration.val_ece_raw:.4f} | {calibration.val_ece:.4f} |",
                  f"| test | {metrics.get('test/ece_raw', float('nan')):.4f} | "
                  f"{metrics.get('test/ece', float('nan')):.4f} |",
                  *([f"| test, against the shares (over people) | | {metrics['test/ece_shares']:.4f} |",
                     "", f"Against each name's majority {label}; the temperature minimizes the validation "
                     "cross-entropy against the shares, which is what the probabilities mean."]
                    if "test/ece_shares" in metrics else []),
                  "", "## Prediction sets (split conformal, thresholds from validation)",
                  "`scripts/predict.py CKPT --coverage C` returns the smallest set of languages holding the true one "
                  "with probability C."
                  + (" This model also trained on the validation names, so that is no longer guaranteed: the test "
                     "column measures it." if refitted else ""), "",
                  "Marginal sets hold the true label that often over all test names; class-conditional "
                  "(Mondrian) sets, a threshold per label, hold it that often within each label "
                  f"(`calibration.sets`; this model serves {calibration.sets} sets).", "",
                  "| coverage asked | sets | probability threshold | test coverage | mean set size |",
                  "|---|---|---|---|---|"]
        for level in calibration.conformal:
            lines += set_rows(calibration, level, metrics)
        rule = calibration.abstention
        if rule:
            lines += ["", "## Abstention (names out of the model's depth)",
                      f"A name abstains, its scores still given, when more than {rule.max_unknown_share:.0%} of its "
                      "characters were never in training, or when its letters are unlike the training names' and no "
                      "label's evidence is strong (trigram novelty plus the energy of the logits, standardized; "
                      f"threshold {rule.threshold:.3f}, set to abstain on {rule.false_abstention:.0%} of the "
                      f"validation names{' for best.ckpt and carried over' if refitted else ''}). Validation: "
                      f"{percent(rule.val_abstained)}; test: {percent(metrics.get('test/abstained'))}."]
        lines += fitted_on_lines(calibration, refitted)
    columns = manifest["columns"] if table else {}
    limits = LIMITS if not table else TABLE_LIMITS.format(
        path=manifest["path"], label=label, column=", ".join(columns.get("share_columns") or [columns["label_column"]]))
    lines += search_lines(checkpoint.get("search") or [])
    lines += ["", "## Intended use and limits", limits, "", "## Reproduce", "```bash", command, "```", ""]
    return "\n".join(lines)


def write_model_card(output_dir: Path, checkpoint_path: str | Path, metrics: dict[str, Any],
                     picks: list | None = None, label_rows: list[dict] | None = None) -> Path:
    """Render the card from the checkpoint and the run's metrics; write MODEL_CARD.md and embed it."""
    checkpoint = load_checkpoint(checkpoint_path)
    manifest_path = Path(output_dir) / "split.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    text = render(checkpoint, metrics, manifest, reproduce_command(), picks, label_rows)
    path = Path(output_dir) / "MODEL_CARD.md"
    write_atomically(path, lambda p: p.write_text(text, encoding="utf-8"))
    update_checkpoint(checkpoint_path, lambda ckpt: ckpt.__setitem__("model_card", text))
    return path
