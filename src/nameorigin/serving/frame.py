"""Predictions for a pandas DataFrame column, for notebooks:

    from nameorigin import Predictor, predict_frame
    scored = predict_frame(df, "surname", Predictor.load("refit.ckpt"), top_k=2, prior="estimate")

The frame comes back with the table command's prediction columns appended (pred_<label>, pred_probability, ...,
pred_abstained, pred_reason), aligned by index: every row, in order, its own columns untouched. A blank, NaN or
None cell gets the blank-input reason, never a prediction. pandas is the optional [frame] extra, imported only
here.
"""

from __future__ import annotations

from typing import Any

from nameorigin.base.errors import UserError
from nameorigin.serving.predict import BATCH_SIZE, Predictor
from nameorigin.serving.schema import OutputOptions, fields_for, table_cells, table_columns


def predict_frame(frame: Any, column: str, predictor: Predictor | str, top_k: int = 1,
                  coverage: float | None = None, batch_size: int = BATCH_SIZE, explain: bool = False,
                  abstain: bool = True, max_set_size: int | None = None, prior: Any = None) -> Any:
    """`frame` with prediction columns appended (a new frame; the input is not changed). `predictor`: a Predictor
    or the path of a checkpoint or export. The options are scripts/predict.py's."""
    try:
        import pandas as pd
    except ImportError:
        raise UserError("predict_frame needs pandas: pip install 'nameorigin[frame]'") from None
    if not isinstance(frame, pd.DataFrame):
        raise UserError(f"predict_frame takes a pandas DataFrame, not {type(frame).__name__}")
    if column not in frame.columns:
        raise UserError(f"column {column!r} is not in the frame: choose one of {', '.join(map(repr, frame.columns))}")
    predictor = Predictor.load(predictor) if not isinstance(predictor, Predictor) else predictor
    cells = frame[column].tolist()
    blank = [cell is None or (isinstance(cell, float) and cell != cell) or not str(cell).strip() for cell in cells]
    names = ["" if is_blank else str(cell) for cell, is_blank in zip(cells, blank, strict=True)]
    # A blank cell goes in as "": the Predictor's own unusable-input answer, never a prediction.
    answers = predictor.predict(names, top_k, batch_size, coverage, explain, abstain, max_set_size, prior)
    shape = OutputOptions(top_k, coverage, explain, predictor.label_name, predictor.normalize)
    rows = [table_cells(answer, shape) for answer in answers]
    added = pd.DataFrame(rows, columns=table_columns(shape), index=frame.index)
    # numbers and flags as such, not the CSV's text
    numbers = [name for name in added.columns if name.startswith("pred_probability")]
    numbers += [field.column_name(shape) for field in fields_for(shape) if field.kind is float]
    for name in numbers:
        added[name] = pd.to_numeric(added[name], errors="coerce")
    for field in fields_for(shape):
        if field.kind is bool:
            added[field.column_name(shape)] = added[field.column_name(shape)] == "true"
    return pd.concat([frame, added], axis=1)
