"""`nameorigin predict`: answers for names, a file of names or a table's column, from a checkpoint alone."""

import csv
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
import typer

from nameorigin.base.errors import UserError
from nameorigin.base.formats import described
from nameorigin.cli.app import NAMES_TOP_K, TABLE_TOP_K, predict_options, takes_options
from nameorigin.serving.predict import Prediction, Predictor
from nameorigin.serving.runs import newest_checkpoint
from nameorigin.serving.schema import OutputOptions, as_json, fields_for, text_lines

Checkpoint = Annotated[str, typer.Argument(help="a .ckpt written by train.py, a .pt2/.onnx from nameorigin export, "
                                                "or 'latest' for the newest run's model (its refit.ckpt, else its "
                                                "best.ckpt)", show_default=False)]
Outputs = Annotated[Path, typer.Option(help="where 'latest' looks for runs")]
Device = Annotated[Literal["cpu", "cuda", "auto"], typer.Option(help="where the model runs")]
Names = Annotated[list[str] | None, typer.Argument(help="names to classify; if none and no --file, standard input",
                                                   show_default=False)]
NamesFile = Annotated[str | None, typer.Option("--file", help="one name per line (UTF-8, blank lines skipped), or "
                                               f"with --column a table with a header row: {described()}")]


def model_path(checkpoint: str, outputs: Path) -> str:
    return str(newest_checkpoint(outputs)) if checkpoint == "latest" else checkpoint


@takes_options()
def predict(checkpoint: Checkpoint, names: Names = None, file: NamesFile = None,
            column: Annotated[list[str] | None, typer.Option(help="with --file: the table column holding the names "
                                                             "(once per part for a model of parts, given first); "
                                                             "every row is written back in order with prediction "
                                                             "columns appended, each distinct name scored once")]
            = None,
            out: Annotated[Path | None, typer.Option(help="write the table (with --column) to this file instead of "
                                                     "standard output (as CSV), in the format its suffix names; it "
                                                     "appears only when complete")] = None,
            delimiter: Annotated[str | None, typer.Option(help="table delimiter (default: tab for .tsv/.tab files, "
                                                          "else comma; 'tab' for a tab)")] = None,
            output_format: Annotated[Literal["text", "json", "csv"], typer.Option("--format", help="how names' "
                                                                                  "answers are written")] = "text",
            uncalibrated: Annotated[bool, typer.Option("--uncalibrated", help="probabilities before temperature "
                                                        "scaling")] = False,
            device: Device = "cpu", outputs: Outputs = Path("outputs"), options: Any = None) -> int:
    """Answer names, a file of names or a table's column: top labels with calibrated probabilities, prediction
    sets, explanations and abstentions."""
    if column and not file:
        raise UserError("--column needs --file: the table to read")
    if (out or delimiter is not None) and not column:
        raise UserError(f"{'--out writes' if out else '--delimiter reads'} tables: use it with --file and --column")
    if out and out.is_dir():
        raise UserError(f"--out {out} is a folder: pass the path of the table to write, e.g. {out / 'out.csv'}")
    if not (names or file) and sys.stdin.isatty():  # reading a terminal would wait for names nobody meant to type
        raise UserError("no names to classify: pass them after the checkpoint, with --file, or on standard input "
                        "(< names.txt)")
    chosen = predict_options(options, TABLE_TOP_K if column else NAMES_TOP_K)
    if uncalibrated and chosen.coverage is not None:
        raise UserError("--coverage sets are fitted on the calibrated probabilities: drop --uncalibrated")
    predictor = Predictor.load(model_path(checkpoint, outputs), device=device, calibrated=not uncalibrated)
    if column:
        from nameorigin.serving.table import predict_table

        summary = predict_table(predictor, file, column, out or sys.stdout, chosen, delimiter)
        print(summary.line() + (f" -> {out}" if out else ""), file=sys.stderr)
        estimated = summary.estimated_prior
    else:
        chosen = chosen.for_model(predictor)  # refused before the names are read
        answers = predictor.answer(read_names(names, file), chosen)
        write(answers.predictions(predictor.label_titles, predictor.label_name), output_format,
              predictor.output_options(chosen))
        estimated = answers.estimated_prior
    report_prior(predictor.labels, estimated)
    return 0


def read_names(names: list[str] | None, file: str | None) -> list[str]:
    """The names given, or a file's lines, or standard input's (blank lines skipped)."""
    if names:
        return list(names)
    if file:
        try:
            with open(file, encoding="utf-8", errors="strict") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            raise UserError(f"--file {file} does not exist: pass an existing file") from None
        except (IsADirectoryError, PermissionError) as error:
            raise UserError(f"--file {file} cannot be read ({error.strerror}): pass a file of names, "
                               "one per line") from None
        except UnicodeDecodeError as error:
            raise UserError(f"--file {file} is not UTF-8 (byte {error.start}): re-save it as UTF-8") from None
    else:
        try:
            lines = sys.stdin.buffer.read().decode("utf-8").splitlines()
        except UnicodeDecodeError as error:
            raise UserError(f"standard input is not UTF-8 (byte {error.start}): re-save the names as UTF-8, "
                               "or pass --file") from None
    return [line for line in lines if line.strip()]


def write(predictions: Iterable[Prediction], fmt: str, shape: OutputOptions) -> None:
    """Answers on stdout as text, JSON or CSV: each carries the fields of the one prediction schema."""
    out = sys.stdout
    if fmt == "json":
        json.dump([as_json(p, shape) for p in predictions], out, ensure_ascii=False, indent=1)
        out.write("\n")
    elif fmt == "csv":  # a row per (name, rank), the schema's fields on each; an unanswered name gets one row
        fields = fields_for(shape)
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["name", shape.label_name, "probability", "rank", *(field.key for field in fields)])
        for p in predictions:
            cells = [field.cell_of(p) for field in fields]
            ranked = [(label, f"{probability:.6f}", rank)
                      for rank, (label, probability) in enumerate(p.predictions, start=1)] or [("", "", "")]
            for label, probability, rank in ranked:
                writer.writerow([p.name, label, probability, rank, *cells])
    else:
        for p in predictions:
            shown = p.name.encode("unicode_escape").decode("ascii") if not p.name.isprintable() else p.name
            if p.error:
                out.write(f"{shown}\n  (no prediction: {p.error})\n")
                continue
            out.write(f"{shown}\n" + "".join(f"  {line}\n" for line in text_lines(p, shape)))


def report_prior(labels: list[str], estimated: torch.Tensor | None) -> None:
    """--prior estimate: the label mix it found, on stderr (the predictions stay on stdout)."""
    if estimated is not None:
        shares = sorted(zip(labels, estimated.tolist(), strict=True), key=lambda x: -x[1])
        print("estimated prior: " + ", ".join(f"{label} {share:.3f}" for label, share in shares), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """`nameorigin predict` with these arguments (scripts/predict.py runs it)."""
    from nameorigin.cli.app import main as nameorigin

    return nameorigin(["predict", *(sys.argv[1:] if argv is None else argv)])
