"""One prediction schema: the fields an answer carries beside its ranked labels, each stated once with its type,
when it is present, and how it reads as JSON, as a table cell and as a line of text. Every output reads this list:
`nameorigin predict --format text|json|csv`, the table writer (`--file`), `predict_frame`, and the server. A new
field is one entry here.

The ranked labels themselves (label, probability per rank) are laid out by each output in its own shape: a list
in JSON, a row per rank in the names CSV, `pred_<label>_<rank>` columns in tables, a line per rank in text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing.TypedDict needs 3.12)

from nameorigin.base.textnorm import normalize_name


class ExplanationPart(TypedDict):
    """One part of an explanation in JSON: a character, an n-gram or known-name evidence, where it sits in the
    normalized name, and what it adds to the label's score."""

    part: str
    kind: str
    span: list[int]
    contribution: float


@dataclass(frozen=True)
class OutputOptions:
    """What the caller asked for, which decides the columns: a table's header is known before any answer."""

    top_k: int
    coverage: float | None = None
    explain: bool = False
    label_name: str = "language"
    normalize: str = "ascii"


def plain_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "|".join(map(str, value))
    return str(value)


def default_text(field: OutputField, value: Any, prediction: Any, options: OutputOptions) -> str | None:
    return None if value is None else f"{field.key}: {field.cell(value)}"


@dataclass(frozen=True)
class OutputField:
    """One field of every answer. `read` takes a Prediction; None means absent (no JSON key, an empty cell, no
    text line). `kind` is the frame column's type (str, float, bool)."""

    key: str
    kind: type
    read: Callable[[Any], Any]
    cell: Callable[[Any], str] = plain_cell
    wanted: Callable[[OutputOptions], bool] = lambda options: True
    column: Callable[[OutputOptions], str] | None = None  # the table column; default pred_<key>
    as_json: Callable[[Any], dict[str, Any]] | None = None  # keys it adds to the JSON answer; default {key: value}
    text: Callable[[OutputField, Any, Any, OutputOptions], str | None] = default_text
    # `read` also takes an Answers (nameorigin.serving.answers), giving an array over its names: the columnar
    # outputs then read the field without a Prediction per name. A field without it is read one Prediction at a time.
    columnar: bool = False
    json_types: dict[str, Any] | None = None  # the JSON keys it adds and their types; default {key: kind}

    def json_fields(self) -> dict[str, Any]:
        """The keys this field adds to a JSON answer, each with its type (for the server's published schema)."""
        return self.json_types or {self.key: list[str] if self.kind is list else self.kind}

    def cell_of(self, prediction: Any) -> str:
        """This field of one answer as a table or CSV cell ("" when absent)."""
        value = self.read(prediction)
        return "" if value is None else self.cell(value)

    def column_name(self, options: OutputOptions) -> str:
        return self.column(options) if self.column else f"pred_{self.key}"

    def json(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        return self.as_json(value) if self.as_json else {self.key: value}


def set_text(field: OutputField, value: Any, prediction: Any, options: OutputOptions) -> str | None:
    if value is None:
        return None  # a class-conditional set can be empty: no label reaches its own threshold
    return f"set: {', '.join(value)}" if value else "set: (empty: no label reaches its threshold)"


def explanation_text(field: OutputField, why: Any, prediction: Any, options: OutputOptions) -> str | None:
    if why is None:
        return None
    return (f"why {why.label}: {why.marked(normalize_name(prediction.name, options.normalize))}  {why.compact()}\n"
            f"    score {why.score:.3f} = baseline {why.baseline:.3f} + parts "
            f"{why.score - why.baseline - why.residual:.3f} (residual {why.residual:.1e})")


def reason_text(field: OutputField, reason: Any, prediction: Any, options: OutputOptions) -> str | None:
    return None if reason is None else f"abstained ({prediction.reason_code}): {reason}"


def silent(field: OutputField, value: Any, prediction: Any, options: OutputOptions) -> None:
    return None  # said in another field's line


FIELDS: list[OutputField] = [
    OutputField("prediction_set", list, lambda p: p.prediction_set, wanted=lambda o: o.coverage is not None,
                column=lambda o: f"pred_set_{o.coverage * 100:g}", text=set_text, columnar=True),
    OutputField("explanation", str, lambda p: p.explanation, cell=lambda why: why.compact(),
                wanted=lambda o: o.explain, as_json=lambda why: why.as_dict(), text=explanation_text, columnar=True,
                json_types={"explained": str, "explanation_score": float, "explanation_baseline": float,
                            "explanation": list[ExplanationPart], "explanation_by_character": list[float],
                            "explanation_residual": float, "explanation_by_name_part": dict[str, float]}),
    OutputField("abstained", bool, lambda p: p.abstained, text=silent, columnar=True),
    OutputField("reason_code", str, lambda p: p.reason_code, text=silent, columnar=True),
    OutputField("reason", str, lambda p: p.reason, text=reason_text, columnar=True),
]


def fields_for(options: OutputOptions) -> list[OutputField]:
    return [field for field in FIELDS if field.wanted(options)]


def ranked_columns(options: OutputOptions) -> list[str]:
    columns = [f"pred_{options.label_name}", "pred_probability"]
    for rank in range(2, options.top_k + 1):
        columns += [f"pred_{options.label_name}_{rank}", f"pred_probability_{rank}"]
    return columns


def table_columns(options: OutputOptions) -> list[str]:
    """The columns a table or frame gains, in order."""
    return [*ranked_columns(options), *(field.column_name(options) for field in fields_for(options))]


def column_kinds(options: OutputOptions) -> list[type]:
    """The type of each of table_columns' columns, for typed outputs (Parquet, frames): labels are text,
    probabilities numbers, then each field's kind."""
    return [str, float] * options.top_k + [field.kind for field in fields_for(options)]


def answer_columns(answers: Any, options: OutputOptions) -> list[Any]:
    """table_columns' values for many answers (nameorigin.serving.answers.Answers), as pyarrow arrays typed as
    column_kinds says (Parquet files, frames, Ray batches): labels dictionary-encoded over the model's labels,
    probabilities rounded to 6 places as in text, each field read from the answers' arrays. Only a field's present
    values that need their own text (a set, an explanation) take Python per name."""
    import pyarrow as pa

    labels = pa.array([*answers.labels, ""], pa.string())  # "" for no label: an unusable name, a rank past them
    columns: list[Any] = []
    for rank in range(options.top_k):
        index = answers.top_index[:, rank]
        columns.append(pa.DictionaryArray.from_arrays(pa.array(np.where(index < 0, len(labels) - 1, index),
                                                               pa.int32()), labels))
        probability = answers.top_probability[:, rank]
        columns.append(pa.array(np.round(probability, 6), pa.float64(), mask=np.isnan(probability)))
    one_by_one: list[Any] = []
    for field in fields_for(options):
        if not field.columnar and not one_by_one:
            one_by_one = answers.predictions()
        values = field.read(answers) if field.columnar else [field.read(p) for p in one_by_one]
        if field.kind is bool:
            columns.append(pa.array(np.asarray(values, dtype=bool)))
        elif field.kind is float:
            columns.append(pa.array(values, pa.float64(), from_pandas=True))
        elif field.cell is plain_cell and field.kind is str:  # text already, or None: no Python per name
            columns.append(pa.array(values, pa.string(), from_pandas=True).fill_null(""))
        else:
            columns.append(pa.array(["" if value is None else field.cell(value) for value in values], pa.string()))
    return columns


def table_cells(prediction: Any, options: OutputOptions) -> list[str]:
    cells = []
    for rank in range(options.top_k):
        if rank < len(prediction.predictions):
            label, probability = prediction.predictions[rank]
            cells += [label, f"{probability:.6f}"]
        else:
            cells += ["", ""]
    return [*cells, *(field.cell_of(prediction) for field in fields_for(options))]


def as_json(prediction: Any, options: OutputOptions | None = None) -> dict[str, Any]:
    """The answer as JSON: its name, its ranked labels, then every present field of the schema."""
    result = {"name": prediction.name,
              "predictions": [{prediction.label_name: label, "probability": round(p, 6)}
                              for label, p in prediction.predictions]}
    if prediction.label_titles:  # the schema's "label_name": the title of the label beside it
        for entry in result["predictions"]:
            entry["label_name"] = prediction.label_titles.get(entry[prediction.label_name], "")
    for field in FIELDS if options is None else fields_for(options):
        result.update(field.json(field.read(prediction)))
    return result


def text_lines(prediction: Any, options: OutputOptions) -> list[str]:
    """The answer's lines under its name in the text output (each indented by two spaces)."""
    lines = []
    for label, probability in prediction.predictions:
        shown = f"{label} {prediction.label_titles.get(label, '')}" if prediction.label_titles else label
        lines.append(f"{shown:<12} {probability:6.1%}")
    for field in fields_for(options):
        line = field.text(field, field.read(prediction), prediction, options)
        if line is not None:
            lines.append(line)
    return lines
