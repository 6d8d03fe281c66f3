"""The registry of recurrent cells: `model.cell=<name>` is the module `nameorigin.model.cells.<name>`, whose
`CELL` states everything that cell is (nameorigin.model.cells.base.CellSpec). A new cell is its module and its
member of the `Cell` Enum (nameorigin.config); the loops, the model, the benchmark and the tests read it here."""

from __future__ import annotations

from importlib import import_module

from nameorigin.base.errors import UserError
from nameorigin.config import Cell, Impl, NetConfig
from nameorigin.model.cells.base import CellSpec

CELLS: dict[Cell, CellSpec] = {cell: import_module(f"{__name__}.{cell.value}").CELL for cell in Cell}


def cell_spec(cell: Cell | str) -> CellSpec:
    """The cell named by the config (the Enum member, or its word)."""
    return CELLS[Cell(cell)]


def triton_cells() -> list[Cell]:
    return [cell for cell, spec in CELLS.items() if spec.triton]


def check_cell(config: NetConfig) -> CellSpec:
    """The config's cell, refused in one line where the chosen loop has none for it."""
    spec = cell_spec(config.cell)
    if config.impl == Impl.triton and not spec.triton:
        raise UserError(f"model.impl=triton has kernels for {', '.join(map(str, triton_cells()))} only, not "
                        f"model.cell={config.cell}: use model.impl=bptt for it")
    return spec
