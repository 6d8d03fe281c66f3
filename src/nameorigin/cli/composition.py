"""`nameorigin composition`: each label's share of a list of names or a table's rows, with intervals."""

from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

import typer

from nameorigin.cli.predict import Checkpoint, Device, Names, NamesFile, Outputs, model_path, read_names
from nameorigin.serving.predict import Predictor


def composition(checkpoint: Checkpoint, names: Names = None, file: NamesFile = None,
                column: Annotated[list[str] | None, typer.Option(help="with --file: the table column holding the "
                                                                 "names (once per part for a model of parts, "
                                                                 "given first)")] = None,
                delimiter: Annotated[str | None, typer.Option(help="table delimiter (default: from the "
                                                              "suffix)")] = None,
                reference: Annotated[Path | None, typer.Option(
                    exists=True, help="for a checkpoint that carries no held-out reference: the corpus folder or "
                    "table it trained on, whose validation names measure the model's confusion (refused for a "
                    "refit, which trained on them)")] = None,
                abstain: Annotated[bool, typer.Option(help="leave out the names the model abstains on")] = True,
                full_names: Annotated[bool, typer.Option("--full-names", help="a model of given and family names: "
                                                         "the names, or the one --column, are full names to split")]
                = False,
                output_format: Annotated[Literal["text", "json"], typer.Option("--format", help="a table or "
                                                                               "JSON")] = "text",
                device: Device = "cpu", outputs: Outputs = Path("outputs")) -> int:
    """Each label's share of the rows: the mean probability, the EM estimate and, with a reference, the
    confusion-adjusted estimate with its 90 % interval (docs/serving.md "Composition")."""
    import json

    from nameorigin.analysis.composition import cells_composition, checkpoint_reference, table_composition
    from nameorigin.base.errors import UserError

    if column and not file:
        raise UserError("--column needs --file: the table to read")
    predictor = Predictor.load(model_path(checkpoint, outputs), device=device)
    found_reference, measured_on = checkpoint_reference(predictor, str(reference) if reference else None)
    if column:
        found = table_composition(predictor, file, column, delimiter, found_reference, abstain=abstain,
                                  full_names=full_names)
    else:
        found = cells_composition(predictor, Counter(read_names(names, file)), found_reference, abstain=abstain,
                                  full_names=full_names)
    found.reference = measured_on
    print(json.dumps(found.as_dict()) if output_format == "json" else found.table())
    return 0
