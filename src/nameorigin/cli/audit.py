"""`nameorigin audit`: the rows of a labelled table (or the shipped corpus) whose labels are probably wrong."""

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from nameorigin.analysis.audit import CUT, CUTS, MODEL, MODELS


def audit(data: Annotated[Path | None, typer.Argument(
              exists=True, help="a folder of <Language>.txt files, or a table (CSV, TSV, Parquet, JSON Lines) with "
              "a name and a label column (default: the shipped corpus)")] = None,
          out: Annotated[Path, typer.Option(dir_okay=False, help="the suspects, most doubtful first: any table "
                                            "format (.csv, .tsv, .parquet, .jsonl)")] = Path("suspects.csv"),
          name_column: Annotated[str, typer.Option(help="a table's name column")] = "name",
          label_column: Annotated[str, typer.Option(help="a table's label column")] = "label",
          folds: Annotated[int, typer.Option(min=2, help="folds of the out-of-sample probabilities")] = 5,
          seed: Annotated[int, typer.Option(help="seed of the folds")] = 0,
          cut: Annotated[Literal[tuple(CUTS)], typer.Option(  # type: ignore[valid-type]
              help="which rows to flag: mixture (the rows most likely relabelled, at random or to a confused label, "
              "as many as maximise the expected F1: the count follows the table), estimate (as many as cleanlab "
              "estimates are mislabelled, the rows of lowest given-label probability), threshold (those under "
              "--threshold), noise_rate or confident (cleanlab's own filters)")] = CUT,
          threshold: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="flag rows whose given label's "
                                                          "out-of-sample probability is below this (implies "
                                                          "--cut threshold)")] = None,
          model: Annotated[Literal[tuple(MODELS)], typer.Option(  # type: ignore[valid-type]
              help="what answers each row out of sample: ngram (the n-gram linear model, seconds) or network "
              "(train.py's model, transferred from the surnames model when `make pretrain` has built it: "
              "minutes a fold)")] = MODEL,
          train_override: Annotated[list[str] | None, typer.Option(
              help="with --model network: a train.py override for every fold's run (repeatable), e.g. "
              "trainer.max_epochs=5")] = None,
          config_dir: Annotated[Path, typer.Option(file_okay=False, help="with --model network: train.py's "
                                                   "config folder")] = Path("conf")) -> int:
    """Find likely label errors: out-of-sample probabilities from a model fitted on the other folds (--model),
    scored by cleanlab (the [audit] extra); --cut decides how many are the suspects. Writes them (row, name,
    given label, suggested label, the given label's probability), most doubtful first;
    `python train.py data.exclude=<out>` trains without them."""
    from nameorigin.analysis.audit import THRESHOLD, OutOfSample
    from nameorigin.analysis.audit import audit as find
    from nameorigin.base.atomic import write_atomically
    from nameorigin.base.formats import written_format
    from nameorigin.base.tables import write_table
    from nameorigin.config import TableDataConfig
    from nameorigin.data.corpus import read_corpus, shipped_corpus

    written_format(out)  # refused before the fit, not after it
    if train_override and model != "network":
        raise typer.BadParameter("train.py overrides apply to --model network only", param_hint="--train-override")
    if data is None or data.is_dir():
        pairs = read_corpus(data or shipped_corpus())[0]
    else:
        from nameorigin.data.table import read_table

        pairs = read_table(TableDataConfig(path=str(data), name_column=name_column, label_column=label_column)).pairs
    settings = OutOfSample(model, tuple(train_override or ()), config_dir)
    found = find(pairs, folds, seed, "threshold" if threshold is not None else cut,
                 THRESHOLD if threshold is None else threshold, settings)
    columns = dict(SUSPECT_COLUMNS)
    rows = [[row[column] for column in columns] for row in found.rows()]
    write_atomically(out, lambda tmp: write_table(tmp, list(columns), list(columns.values()), rows, "--out"))
    print(f"{found.summary()}; wrote {out}", file=sys.stderr)
    return 0


# The suspects table's columns and their kinds, in order.
SUSPECT_COLUMNS = (("row", int), ("name", str), ("given_label", str), ("suggested_label", str),
                   ("given_label_probability", float))
