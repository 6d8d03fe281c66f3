"""nameorigin: character-level recurrent classifiers of a name's language of origin.

Subpackages, bottom to top; imports run one way (the contract in pyproject.toml, checked by `make lint` and the
tests):

- base: the user-error type, atomic writes, text normalization and encoding, safe checkpoint reading
- config: the typed schema of every config group
- data: corpus readers (the shipped tutorial corpus, names-dataset), the leakage-free split, batches
- model: CharRNN and its parts (the cell, the BPTT backward, n-grams, known names, calibration maths)
- training: the LightningModule, callbacks, dashboard, calibration fit, refit, model card, pipeline
- serving: Predictor, export, tables
- analysis: evaluation on a held-out split, the paired baseline comparison, the benchmark's contenders
- cli: the `nameorigin` command and its subcommands (predict, evaluate, export, serve, ...)
"""

__all__ = ["Predictor", "PredictOptions", "predict_frame", "frame_composition"]


def __getattr__(name: str):  # imported on first use: `import nameorigin` stays light
    if name == "Predictor":
        from nameorigin.serving.predict import Predictor

        return Predictor
    if name == "PredictOptions":
        from nameorigin.serving.options import PredictOptions

        return PredictOptions
    if name == "predict_frame":
        from nameorigin.serving.frame import predict_frame

        return predict_frame
    if name == "frame_composition":
        from nameorigin.analysis.composition import frame_composition

        return frame_composition
    raise AttributeError(f"module 'nameorigin' has no attribute {name!r}")
