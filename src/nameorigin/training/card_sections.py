"""The model card's parts that do not depend on one run's sections: its fixed texts (what the model is not for),
how a source, a share or a figure reads, and the rows of its tables (prediction sets, searched candidates, what
fitted each part)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nameorigin.config import OBJECTIVES
from nameorigin.data.corpus import shipped_corpus
from nameorigin.model.artifacts import Calibration
from nameorigin.training import transfer
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



# Training pairs past which the card points at the hashed n-gram baseline: the LR grid takes hours.
LARGE_TABLE = 200_000


def plural(word: str) -> str:
    return f"{word[:-1]}ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else f"{word}s"


def percent(value: Any) -> str:
    return "n/a" if value is None else f"{100 * float(value):.1f} %"


def in_pretrain(metrics: dict[str, Any], manifest: dict) -> str:
    """How many of the test names the starting point's table holds: "1,034 of 1,803 (57.3 %)"."""
    share, size = metrics["test/share_in_pretrain"], manifest.get("sizes", {}).get("test")
    return f"{round(share * size):,} of {size:,} ({percent(share)})" if size else percent(share)


def name_source(columns: dict, rows: dict | None, join: str | None) -> str:
    """Where a table's names came from: one column, the parts' columns, or full names split by nameparser."""
    read = "glued into one string \"Given Family\"" if join == "space" else "a boundary token between the parts"
    if columns.get("name_columns"):
        listed = ", ".join(f"`{c}`" for c in columns["name_columns"])
        return f"names in parts from columns {listed} (given first, family last), {read}"
    if columns.get("split_full_name"):
        rows = rows or {}
        return (f"full names from column `{columns['name_column']}`, split into given and family by nameparser "
                f"({rows.get('split_one_part', 0):,} distinct names left in one part, "
                f"{rows.get('split_comma', 0):,} read as \"Family, Given\"), {read}")
    return f"names from column `{columns['name_column']}`"


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


def transfer_lines(metrics: dict[str, Any]) -> list[str]:
    """What outside data the run tried (transfer.use=auto with a starting point) and which model validation kept."""
    scores = transfer.compared(metrics)
    if scores is None:
        return []
    objective, plain_score, transferred_score = scores
    kept = "the transferred model" if metrics["transfer/chosen"] else "the plain model (no outside data in it)"
    return [f"- Outside data tried: the starting point `make pretrain` builds from names-dataset's names and their "
            f"country shares. Validation kept {kept}: {OBJECTIVES[objective]} {plain_score:.4f} plain, "
            f"{transferred_score:.4f} transferred, after "
            f"{metrics['transfer/fit_s_plain']:.0f} s and {metrics['transfer/fit_s_transferred']:.0f} s of training."]


def ensemble_lines(metrics: dict[str, Any]) -> list[str]:
    """How many networks the run tried (ensemble.members) and how many validation kept, with what each bought."""
    if "ensemble/members" not in metrics:
        return []
    return [f"- Ensemble of networks trained from consecutive seeds on the training split: "
            f"{ensemble_summary(metrics)}."]


def ensemble_summary(metrics: dict[str, Any]) -> str:
    """"3 of 3 served as one model (validation accuracy 0.85, 0.86, 0.87 for the first 1, 2, 3; 300 s of training
    more, 3x the prediction work)": the results block's line and the card's."""
    tried = sorted((int(key.rsplit("_", 1)[1]), value) for key, value in metrics.items()
                   if key.startswith("ensemble/val_acc_"))
    served = int(metrics["ensemble/members"])
    return (f"{served} of {len(tried)} served as one model (validation accuracy "
            f"{', '.join(f'{value:.4f}' for _, value in tried)} for the first {', '.join(str(k) for k, _ in tried)}; "
            f"{metrics['ensemble/fit_s_others']:.0f} s of training more, {served}x the prediction work)")
