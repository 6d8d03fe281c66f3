"""The registry of recurrent cells (nameorigin.base.registry): `model.cell=<name>` is the module
`nameorigin.model.cells.<name>`, whose `CELL` states everything that cell is (nameorigin.model.cells.base.CellSpec).
A new cell is its module and its member of the `Cell` Enum (nameorigin.config); the loops, the model, the benchmark
and the tests read it here."""

from __future__ import annotations

from nameorigin.base.errors import UserError
from nameorigin.base.registry import Registry
from nameorigin.config import Cell, Impl, NetConfig
from nameorigin.model.cells.base import CellSpec

CELLS = Registry("model.cell", {cell.value: f"{__name__}.{cell.value}:CELL" for cell in Cell})


def cell_spec(cell: Cell | str) -> CellSpec:
    """The cell named by the config (the Enum member, or its word)."""
    return CELLS[Cell(cell).value]


def triton_cells() -> list[Cell]:
    return [Cell(name) for name, spec in CELLS.items() if spec.triton]


def check_cell(config: NetConfig) -> CellSpec:
    """The config's cell, refused in one line where the chosen loop has none for it."""
    spec = cell_spec(config.cell)
    if config.impl == Impl.triton and not spec.triton:
        raise UserError(f"model.impl=triton has kernels for {', '.join(map(str, triton_cells()))} only, not "
                        f"model.cell={config.cell}: use model.impl=bptt for it")
    return spec
