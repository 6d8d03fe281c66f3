"""`nameorigin evaluate`: a checkpoint on its own held-out test split, beside the n-gram baseline; `nameorigin card`:
the model card stored in it."""

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.base.errors import UserError
from nameorigin.cli.predict import Checkpoint, Device, Outputs, model_path
from nameorigin.serving.options import BATCH_SIZE
from nameorigin.serving.predict import EXPORTED_SUFFIXES, Predictor, read_sidecar


def evaluate(checkpoint: Checkpoint,
             data: Annotated[Path | None, typer.Argument(exists=True, help="the folder of <Language>.txt files or "
                                                         "the table the checkpoint trained on (default: the corpus "
                                                         "shipped in the package)", show_default=False)] = None,
             baseline: Annotated[Literal["lr", "ngram"] | None, typer.Option(
                 help="also fit the char-n-gram baseline on the same split and compare the two on the same test "
                 "names: lr, TF-IDF + logistic regression, C chosen on validation; ngram, the project's hashed "
                 "n-gram linear model (the model's linear part alone), for tables of hundreds of thousands of "
                 "names")] = None,
             known_names: Annotated[Path | None, typer.Option(exists=True, help="a surnames cache (data/surnames): "
                                                              "score the test names found in it and those not "
                                                              "found, apart")] = None,
             explain: Annotated[bool, typer.Option("--explain", help="also check the explanations on the test names: "
                                                   "their "
                                                   "residual and the deletion check")] = False,
             output_format: Annotated[Literal["text", "json"], typer.Option(
                 "--format", help="json prints the whole report (every label's row under per_label; with --baseline, "
                 "the comparison under baseline)")] = "text",
             batch_size: Annotated[int, typer.Option(min=1, help="names per forward pass")] = BATCH_SIZE,
             device: Device = "cpu", outputs: Outputs = Path("outputs")) -> int:
    """Score a checkpoint on its own held-out test split, rebuilt from the data it trained on."""
    from nameorigin.analysis.evaluate import evaluate as evaluate_split
    from nameorigin.analysis.evaluate import format_report
    from nameorigin.data.corpus import shipped_corpus

    if output_format == "json" and explain:
        raise UserError("--format json prints the test report and the baseline's comparison: drop --explain, or "
                        "use --format text")
    root = str(data or shipped_corpus())
    predictor = Predictor.load(model_path(checkpoint, outputs), device=device)
    result = evaluate_split(predictor, root, batch_size, known_test_names(known_names))
    result["margin_at_training"] = predictor.meta.margin
    if output_format == "json":
        if baseline:
            from nameorigin.analysis.paired import compare_with_baseline

            result["baseline"] = compare_with_baseline(predictor, root, batch_size, result, baseline)
        print(json.dumps(result))
        return 0
    print(format_report(result))
    if predictor.meta.margin:
        from nameorigin.evaluation.margin import margin_line

        print(f"\nmargin measured when the run ended: {margin_line(predictor.meta.margin)}")
    if explain:
        from nameorigin.analysis.explain_check import explanation_check, format_check

        print("\n" + format_check(explanation_check(predictor, root, batch_size)))
    if baseline:
        from nameorigin.analysis.paired import compare_with_baseline, format_comparison

        print("\n" + format_comparison(compare_with_baseline(predictor, root, batch_size, result, baseline)))
    return 0


def known_test_names(cache: Path | None) -> set[str] | None:
    """The names of a surnames cache, as the evaluation looks them up (None without one)."""
    if cache is None:
        return None
    from nameorigin.data.surnames import Surnames
    from nameorigin.model.known import name_key

    try:
        return {name_key(name) for name in Surnames(cache, convert_if_missing=False).names}
    except UserError as error:
        raise UserError(f"--known-names: {error}") from None


def card(checkpoint: Checkpoint, outputs: Outputs = Path("outputs")) -> int:
    """Print the model card stored in the run's model (refit.ckpt, or best.ckpt in a run without a refit)."""
    path = model_path(checkpoint, outputs)
    saved = read_sidecar(path) if Path(path).suffix in EXPORTED_SUFFIXES else load_checkpoint(path)
    text = saved.get("model_card")
    if not text:
        raise UserError(f"checkpoint {path} holds no model card: the card goes into the run's model when training "
                        "ends; use refit.ckpt (best.ckpt in a run without a refit)")
    print(text, end="")
    return 0
