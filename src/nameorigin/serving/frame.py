"""Predictions for a pandas DataFrame column, for notebooks:

    from nameorigin import PredictOptions, Predictor, predict_frame
    scored = predict_frame(df, "surname", Predictor.load("refit.ckpt"), PredictOptions(top_k=2, prior="estimate"))

The frame comes back with the table command's prediction columns appended (pred_<label>, pred_probability, ...,
pred_abstained, pred_reason), aligned by index: every row, in order, its own columns untouched. A blank, NaN or
None cell gets the blank-input reason, never a prediction. Each distinct name is scored once
(nameorigin.serving.distinct). pandas is the optional [frame] extra, imported only
here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from nameorigin.base.errors import UserError
from nameorigin.base.extras import require_extra
from nameorigin.serving.distinct import DistinctNames, score
from nameorigin.serving.name_columns import check_columns, frame_name_columns, joined_frame_cells
from nameorigin.serving.options import TABLE_OPTIONS, PredictOptions, options_of
from nameorigin.serving.predict import Predictor
from nameorigin.serving.schema import answer_columns, column_kinds, table_columns


def predict_frame(frame: Any, column: str | list[str], predictor: Predictor | str,
                  options: PredictOptions | None = None,
                  markers: bool = False, **settings: Any) -> Any:
    """`frame` with prediction columns appended (a new frame; the input is not changed). `predictor`: a Predictor
    or the path of a checkpoint or export; `options` (or its fields as keywords): as for tables, the best label
    per row by default. `column`: the column of names, or a list of columns holding a name's parts, given first
    (a model trained on parts).
    `markers`: a cell spelling a missing value ("NaN", "NULL", ...) gets the unusable-input answer, as the table
    command gives it; off by default, since pandas has already read such cells of a CSV as missing."""
    pd = require_extra("pandas", "frame", "predict_frame")
    import pyarrow as pa
    if not isinstance(frame, pd.DataFrame):
        raise UserError(f"predict_frame takes a pandas DataFrame, not {type(frame).__name__}")
    columns = frame_name_columns(frame, column)
    predictor = Predictor.load(predictor) if not isinstance(predictor, Predictor) else predictor
    options = options_of(options, settings, TABLE_OPTIONS).for_model(predictor)  # a bad option fails first
    check_columns(predictor.part_names, columns, options.full_names)
    if len(columns) == 1:
        cells = frame[columns[0]].tolist()
        missing = frame[columns[0]].isna().tolist()  # None, NaN, pd.NA and NaT alike, in one vectorized pass
    else:
        cells = joined_frame_cells(frame, columns)
        missing = [cell is None for cell in cells]
    blank = [gone or not str(cell).strip() for cell, gone in zip(cells, missing, strict=True)]
    # A blank cell goes in as "": the Predictor's own unusable-input answer, never a prediction.
    names = Counter("" if is_blank else str(cell) for cell, is_blank in zip(cells, blank, strict=True))
    groups = DistinctNames.group(list(names), list(names.values()), predictor.normalize, markers=markers)
    if options.estimates_prior:
        options = replace(options, prior=groups.estimate_prior(predictor, options.batch_size, options.full_names))
    answers = score(predictor, groups.keys, options)
    shape = predictor.output_options(options)
    entry = dict(zip(names, groups.answer_of.tolist(), strict=True))
    rows = np.array([entry["" if is_blank else str(cell)] for cell, is_blank in zip(cells, blank, strict=True)],
                    dtype=np.int64)
    taken = pa.array(rows)
    added = pd.DataFrame({name: values.take(taken).to_numpy(zero_copy_only=False).astype(
                          float if kind is float else bool if kind is bool else object) for name, kind, values in
                          zip(table_columns(shape), column_kinds(shape), answer_columns(answers, shape), strict=True)},
                         index=frame.index)
    return pd.concat([frame, added], axis=1)
