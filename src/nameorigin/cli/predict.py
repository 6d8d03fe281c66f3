"""Predict the language of origin of names from a checkpoint alone.

  python scripts/predict.py outputs/.../checkpoints/best.ckpt Nakamura Dovesky "O'Neill"
  python scripts/predict.py latest --top-k 5 --format json < names.txt
  python scripts/predict.py best.ckpt Nakamura --coverage 0.9      # the set of languages holding the true one 90 %
  python scripts/predict.py best.ckpt Nakamura --explain           # why: one contribution per character and n-gram
  python scripts/predict.py best.ckpt --evaluate --explain        # the explanations' residual and deletion check
  python scripts/predict.py best.ckpt --file people.csv --column surname --out people_with_origin.csv
  python scripts/predict.py best.ckpt --file people.parquet --column surname --out scored.parquet
  python scripts/predict.py best.ckpt --evaluate             # on the shipped corpus the model trained on
  python scripts/predict.py best.ckpt --evaluate --baseline    # + the n-gram baseline, name by name
  python scripts/predict.py refit.ckpt --card                     # the model card stored in the run's model
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.base.formats import described
from nameorigin.cli.flags import TABLE_TOP_K, add_prediction_flags, options_from
from nameorigin.serving.predict import (
    EXPORTED_SUFFIXES,
    Prediction,
    Predictor,
    load_checkpoint,
    newest_checkpoint,
    read_sidecar,
)
from nameorigin.serving.schema import OutputOptions, as_json, fields_for, text_lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt written by train.py, a .pt2/.onnx from scripts/export.py, or "
                        "'latest' for the newest run's model (its refit.ckpt, else its best.ckpt)")
    parser.add_argument("names", nargs="*", help="names to classify; if none and no --file, read standard input")
    parser.add_argument("--file", help="one name per line (UTF-8, blank lines skipped), or with --column a table "
                        f"with a header row: {described()}")
    parser.add_argument("--column", help="with --file: the table column holding the names; every row is written "
                        "back in order with prediction columns appended, each distinct name scored once")
    parser.add_argument("--delimiter", help="table delimiter (default: tab for .tsv/.tab files, else comma; "
                        "'tab' for a tab)")
    parser.add_argument("--out", help="write the table (with --column) to this file instead of standard output "
                        f"(as CSV), in the format its suffix names: {described()}; it appears only when complete")
    add_prediction_flags(parser)  # --top-k, --coverage, --explain, --no-abstain, ... (PredictOptions)
    parser.add_argument("--uncalibrated", action="store_true",
                        help="probabilities before temperature scaling (calibrated is the default)")
    parser.add_argument("--format", choices=("text", "json", "csv"), default="text",
                        help="output format for names; with --evaluate, json prints the whole report (every label's "
                        "row with its intervals under per_label)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    parser.add_argument("--outputs", default="outputs", help="where 'latest' looks for runs (default outputs)")
    parser.add_argument("--evaluate", metavar="DIR", nargs="?", const="",
                        help="score the checkpoint on its own held-out test split rebuilt from DIR, a folder of "
                        "<Language>.txt files or the table it was trained on (no DIR: the corpus shipped in the "
                        "package, the default data.root)")
    parser.add_argument("--known-names", metavar="CACHE", help="with --evaluate: also score the test names found "
                        "in this surnames cache (data/surnames) and those not found, apart")
    parser.add_argument("--baseline", nargs="?", const="lr", choices=("lr", "sgd"),
                        help="with --evaluate: also fit the char-n-gram baseline on the checkpoint's own split and "
                        "compare the two on the same test names (needs the [bench] extra: scikit-learn); lr "
                        "(the default): TF-IDF + logistic regression, C chosen on validation; sgd: the n-grams hashed "
                        "and fitted by SGD, alpha chosen on validation, for tables of hundreds of thousands of names")
    parser.add_argument("--composition", action="store_true",
                        help="instead of an answer per name, each label's share of the rows (names, --file, or "
                        "--file with --column): the mean probability, the EM estimate and, with a reference, the "
                        "confusion-adjusted estimate, each with a 90%% interval (docs/serving.md \"Composition\")")
    parser.add_argument("--reference", metavar="DIR",
                        help="with --composition, for a checkpoint that carries no held-out reference: the corpus "
                        "folder or table it trained on, whose validation names measure the model's confusion "
                        "(default: the reference in the checkpoint; else the shipped corpus, when it trained on it). "
                        "Refused for a refit, which trained on those names")
    parser.add_argument("--card", action="store_true", help="print the model card stored in the run's model "
                        "(refit.ckpt, or best.ckpt in a run without a refit)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    check_args(parser, args)
    return args


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the flags cannot say together (PredictOptions checks its own); the shipped corpus for a bare
    --evaluate."""
    if args.composition and (args.evaluate is not None or args.card or args.out or args.explain
                             or args.coverage is not None or args.prior is not None):
        parser.error("--composition answers for the whole list: drop --evaluate, --card, --out, --explain, "
                     "--coverage and --prior")
    if args.reference and not args.composition:
        parser.error("--reference measures the model for --composition: use them together")
    if args.column and not args.file:
        parser.error("--column needs --file: the table to read")
    if args.out and not args.column:
        parser.error("--out writes tables: use it with --file and --column")
    if args.out and Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a folder: pass the path of the table to write, e.g. {args.out}/out.csv")
    if args.delimiter is not None and not args.column:
        parser.error("--delimiter reads tables: use it with --file and --column")
    if args.explain and args.card:
        parser.error("--explain explains predictions: use it with names, --file, standard input or --evaluate")
    evaluating = args.evaluate is not None  # "" (no DIR): the shipped corpus
    if evaluating and args.format == "csv":
        parser.error("--format csv writes answers to names: with --evaluate pass --format text or json")
    if evaluating and args.format == "json" and (args.baseline or args.explain):
        parser.error("--format json with --evaluate prints the test report alone: drop --baseline and --explain, "
                     "or use --format text")
    if args.baseline and not evaluating:
        parser.error("--baseline compares on the test split: use it with --evaluate DIR")
    if args.known_names and not evaluating:
        parser.error("--known-names splits the test-split scores: use it with --evaluate DIR")
    shaping = [name for name in options_from(args).changed() if name not in ("explain", "batch_size", "top_k")]
    if shaping and (evaluating or args.card):
        parser.error(f"{', '.join(shaping)} shape answers to names: use them with names, --file or standard input")
    if args.uncalibrated and args.coverage is not None:
        parser.error("--coverage sets are fitted on the calibrated probabilities: drop --uncalibrated")
    if args.evaluate == "":
        from nameorigin.data.corpus import shipped_corpus

        args.evaluate = str(shipped_corpus())
    if args.evaluate and not Path(args.evaluate).exists():
        parser.error(f"--evaluate {args.evaluate} does not exist: pass the folder of <Language>.txt files or the "
                     "table the checkpoint was trained on")
    if not (args.names or args.file or args.evaluate or args.card) and sys.stdin.isatty():
        # Reading a terminal would wait, silently, for names nobody meant to type.
        parser.error("no names to classify: pass them after the checkpoint, with --file, or on standard input "
                     "(< names.txt)")


def read_names(args: argparse.Namespace) -> list[str]:
    if args.names:
        return list(args.names)
    if args.file:
        try:
            with open(args.file, encoding="utf-8", errors="strict") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            raise UserError(f"--file {args.file} does not exist: pass an existing file") from None
        except (IsADirectoryError, PermissionError) as error:
            raise UserError(f"--file {args.file} cannot be read ({error.strerror}): pass a file of names, "
                               "one per line") from None
        except UnicodeDecodeError as error:
            raise UserError(f"--file {args.file} is not UTF-8 (byte {error.start}): re-save it as UTF-8") from None
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


def report_prior(predictor: Predictor) -> None:
    """--prior estimate: the label mix it found, on stderr (the predictions stay on stdout)."""
    if predictor.estimated_prior is not None:
        shares = sorted(zip(predictor.labels, predictor.estimated_prior.tolist(), strict=True), key=lambda x: -x[1])
        print("estimated prior: " + ", ".join(f"{label} {share:.3f}" for label, share in shares), file=sys.stderr)


def print_composition(predictor: Predictor, args: argparse.Namespace) -> int:
    from collections import Counter

    from nameorigin.analysis.composition import cells_composition, checkpoint_reference, table_composition

    reference, measured_on = checkpoint_reference(predictor, args.reference)
    if args.column:
        found = table_composition(predictor, args.file, args.column, args.delimiter, reference,
                                  abstain=args.abstain)
    else:
        found = cells_composition(predictor, Counter(read_names(args)), reference, abstain=args.abstain)
    found.reference = measured_on
    print(json.dumps(found.as_dict()) if args.format == "json" else found.table())
    return 0


def print_card(path: str) -> None:
    saved = read_sidecar(path) if Path(path).suffix in EXPORTED_SUFFIXES else load_checkpoint(path)
    card = saved.get("model_card")
    if not card:
        raise UserError(f"checkpoint {path} holds no model card: the card goes into the run's model when "
                           "training ends; use refit.ckpt (best.ckpt in a run without a refit)")
    sys.stdout.write(card)


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        path = newest_checkpoint(args.outputs) if args.checkpoint == "latest" else args.checkpoint
        if args.card:
            print_card(path)
            return 0
        predictor = Predictor.load(path, device=args.device, calibrated=not args.uncalibrated)
        if args.evaluate:
            from nameorigin.analysis.evaluate import evaluate, format_report

            known = None
            if args.known_names:
                from nameorigin.base.errors import UserError
                from nameorigin.data.surnames import Surnames
                from nameorigin.model.known import name_key

                try:
                    known = {name_key(name) for name in Surnames(args.known_names, convert_if_missing=False).names}
                except UserError as error:
                    raise UserError(f"--known-names: {error}") from None
            result = evaluate(predictor, args.evaluate, args.batch_size, known)
            result["margin_at_training"] = predictor.meta.margin
            if args.format == "json":
                print(json.dumps(result))
                return 0
            print(format_report(result))
            if predictor.meta.margin:
                from nameorigin.training.margin import margin_line

                print(f"\nmargin measured when the run ended: {margin_line(predictor.meta.margin)}")
            if args.explain:
                from nameorigin.analysis.explain_check import explanation_check, format_check

                print("\n" + format_check(explanation_check(predictor, args.evaluate, args.batch_size)))
            if args.baseline:
                from nameorigin.analysis.paired import compare_with_baseline, format_comparison

                paired = compare_with_baseline(predictor, args.evaluate, args.batch_size, result, args.baseline)
                print("\n" + format_comparison(paired))
            return 0
        if args.composition:
            return print_composition(predictor, args)
        if args.column:
            from nameorigin.serving.table import predict_table

            summary = predict_table(predictor, args.file, args.column, args.out or sys.stdout,
                                    options_from(args, TABLE_TOP_K), args.delimiter)
            print(summary.line() + (f" -> {args.out}" if args.out else ""), file=sys.stderr)
            report_prior(predictor)
            return 0
        options = options_from(args).for_model(predictor)  # refused before the names are read
        write(predictor.predict(read_names(args), options), args.format, predictor.output_options(options))
        report_prior(predictor)
    except BrokenPipeError:  # `| head` closed the pipe: not an error
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
