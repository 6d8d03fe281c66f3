"""StepProfile: where a training step's time goes, measured in a real run (`python train.py debug=step_profile`).

Over a window of training steps it clocks each step's phases (waiting on the loader, the forward pass and loss,
the backward pass, the optimizer with clipping and zeroing); over the next window it runs torch's profiler, whose
operators are sorted by self CPU time into the matrix products, the n-gram head's table, the optimizer's kernels
and every other operator (the per-timestep elementwise work), and the interpreter's time between them: the
overhead a loop over characters pays once a character. The result goes to train.log in one line and to
step_profile.json in the run folder; docs/speed.md reads it per tier.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

log = logging.getLogger(__name__)

PHASES = ("loader", "forward", "backward", "optimizer")
# Operators by what they are: the cell's and the heads' products, the n-gram head's table (its lookup's backward:
# the dense gradient it fills), the optimizer's kernels, the other operators (the elementwise work), and what is not
# an operator at all: the profiler's named ranges (the optimizer's step, which runs Lightning's closure, and the
# autograd functions) hold the interpreter's own time between operators.
PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
NGRAM_TABLE = ("aten::embedding_dense_backward", "aten::embedding_backward", "aten::index_add_",
               "aten::_embedding_bag", "aten::_embedding_bag_backward", "aten::embedding_bag")
OPTIMIZER = ("aten::_fused_adamw_", "aten::_fused_adam_", "aten::_foreach_")


def kind_of(operator: str) -> str:
    if not operator.startswith("aten::"):
        return "python"
    if operator in PRODUCTS:
        return "products"
    if operator in NGRAM_TABLE:
        return "ngram_table"
    if operator.startswith(OPTIMIZER):
        return "optimizer_kernels"
    return "elementwise"


class StepProfile(Callback):
    """Clock training steps skip+1 .. skip+steps of the first epoch by phase (the first ones warm caches up), then
    profile the next `steps` steps' operators (the profiler's own cost stays out of the clocked steps)."""

    def __init__(self, dirpath: str, skip: int = 10, steps: int = 40) -> None:
        self.dirpath, self.skip, self.steps = Path(dirpath), skip, steps
        self.phases = {phase: 0.0 for phase in PHASES}
        self.names, self.seen, self.mark, self.last_end = 0, 0, 0.0, None
        self.profiler: torch.profiler.profile | None = None
        self.operators: dict[str, float] = {}
        self.top: dict[str, float] = {}
        self.operator_calls = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """An epoch shorter than the two windows shares its steps out between them."""
        batches = int(trainer.num_training_batches)
        self.skip = min(self.skip, batches // 10)
        self.steps = max(1, min(self.steps, (batches - self.skip) // 2))

    def clocking(self) -> bool:
        return self.skip <= self.seen < self.skip + self.steps

    def profiling(self) -> bool:
        return self.skip + self.steps <= self.seen < self.skip + 2 * self.steps

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.clocking() and self.last_end is not None and self.seen > self.skip:
            self.phases["loader"] += time.perf_counter() - self.last_end
        if self.seen == self.skip + self.steps:
            self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            self.profiler.__enter__()
        self.mark = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        if self.clocking():
            self.phases[phase] += now - self.mark
        self.mark = now

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self.lap("forward")

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.lap("backward")

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.lap("optimizer")
        if self.clocking():
            self.names += len(batch.lengths)
        self.seen += 1
        self.last_end = time.perf_counter()
        if self.seen == self.skip + 2 * self.steps and self.profiler is not None:
            self.finish(trainer)

    def finish(self, trainer: pl.Trainer) -> None:
        self.profiler.__exit__(None, None, None)
        for event in self.profiler.key_averages():
            kind = kind_of(event.key)
            self.operators[kind] = self.operators.get(kind, 0.0) + event.self_cpu_time_total / 1e6
            self.top[event.key] = event.self_cpu_time_total / 1e6
            self.operator_calls += event.count
        self.profiler = None
        if trainer.is_global_zero:
            report = self.report()
            self.dirpath.mkdir(parents=True, exist_ok=True)
            (self.dirpath / "step_profile.json").write_text(json.dumps(report, indent=1) + "\n")
            log.info("step profile: %s", describe(report))

    def report(self) -> dict[str, Any]:
        total = sum(self.phases.values())
        operators = sum(self.operators.values())
        return {"steps": self.steps, "names": self.names, "seconds": round(total, 3),
                "names_per_s": round(self.names / total, 1) if total else None,
                "phases": {phase: round(s / total, 3) for phase, s in self.phases.items()},
                "operators": {kind: round(s / operators, 3) for kind, s in sorted(self.operators.items())},
                "top_operators": {key: round(s / operators, 3)
                                  for key, s in sorted(self.top.items(), key=lambda item: -item[1])[:12]},
                "operator_calls_per_step": round(self.operator_calls / self.steps)}


def describe(report: dict[str, Any]) -> str:
    phases = ", ".join(f"{phase} {share:.0%}" for phase, share in report["phases"].items())
    operators = ", ".join(f"{kind.replace('_', ' ')} {share:.0%}" for kind, share in report["operators"].items())
    return (f"{report['steps']} steps at {report['names_per_s']:.0f} names/s; {phases}; operators' own time: "
            f"{operators}; {report['operator_calls_per_step']} operator calls a step")
