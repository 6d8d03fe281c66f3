"""The fast path (model.fast_path): the whole training step, captured as a CUDA graph per shape and replayed.

A step of this model is a few hundred small kernels (one cell per character, its backward, the heads, the
optimizer), so on a GPU the host's launches and Python, not the arithmetic, set its time. A CUDA graph records
those launches once per (name length, batch size) and replays them as one. What makes the step capturable:
- **shapes the host knows.** The loader hands out batches of names of one length (data.batching, one_length), so
  the loop needs neither the sort by length nor `batch_sizes.tolist()` (CharRNN's `one_length`);
- **the training split on the device.** A batch is a vector of row indices; the graph gathers its tokens,
  targets, shares and weights from the split kept on the device, into shapes fixed by that key;
- **a capturable optimizer,** its learning rates tensors that the epoch's schedule fills in place;
- **no host syncs inside.** The loss's finiteness is a flag the graph sets, read every `check_every` steps and
  at the epoch's end (a divergence still stops the run, a few steps late); the training loss and accuracy add up
  on the device and are logged once an epoch, not through torchmetrics, whose input checks read back;
- **gradient clipping inside,** by norm, since Lightning's own cannot run under manual optimization.

The steps the gradient-accumulation check samples run outside the graph, through Lightning's backward, so its
hooks see them. Without CUDA (model.fast_path=on on the CPU) the same step runs eagerly: the tests compare it
with the dynamic step, and CPU runs show what one-length batches do to accuracy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from nameorigin.base.errors import UserError
from nameorigin.data.batching import Batch

WARMUP = 2  # eager steps of a shape before its capture: the optimizer's state and cuBLAS's workspace exist by then


def device_rows(dataset: Any, device: torch.device) -> Batch:
    """Every row of a split, encoded as its loader encodes a batch, on the device."""
    batch = dataset.collate(list(range(len(dataset))))
    return Batch(*(None if part is None else part.to(device) for part in batch))


def fast_optimizer(factory: Any, params: Any, base_lr: float, device: torch.device) -> torch.optim.Optimizer:
    """The optimizer with capturable state and tensor learning rates on the device, so a captured step reads the
    rate the schedule sets instead of the one it was captured with."""
    groups = params if isinstance(params, list) and params and isinstance(params[0], dict) else [{"params": params}]
    groups = [{**group, "lr": torch.tensor(float(group.get("lr", base_lr)), device=device)} for group in groups]
    try:
        return factory(params=groups, lr=torch.tensor(base_lr, device=device), capturable=True)
    except TypeError:
        name = getattr(getattr(factory, "func", factory), "__name__", str(factory))
        raise UserError(f"model.fast_path: {name} has no capturable step; use torch.optim.AdamW or Adam, or set "
                        "model.fast_path=off") from None


class GraphedSteps:
    """The fast path's training step for one fit: its device split, its graphs and its device-side tallies."""

    def __init__(self, module: Any, rows: Batch, clip: float | None, check_every: int = 50):
        self.module, self.rows, self.clip, self.check_every = module, rows, clip, check_every
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self.seen: Counter = Counter()
        self.use_graphs = rows.tokens.is_cuda
        device = rows.tokens.device
        self.nonfinite = torch.zeros((), dtype=torch.bool, device=device)
        self.loss_sum, self.correct = torch.zeros((), device=device), torch.zeros((), device=device)
        self.names, self.steps = 0, 0
        if self.use_graphs:  # a resumed optimizer's rates come back from the checkpoint on the CPU
            for group in module.optimizers().optimizer.param_groups:
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"] = group["lr"].to(device)

    def gather(self, rows: torch.Tensor, length: int) -> Batch:
        """The batch of these row indices, every name `length` characters long (device ops only)."""
        split = self.rows
        return Batch(split.tokens[rows, :length], split.lengths[rows], split.targets[rows], split.shares[rows],
                     None if split.weights is None else split.weights[rows])

    def step_body(self, rows: torch.Tensor, length: int, capture: bool = False) -> torch.Tensor:
        """One whole step: forward, loss, backward, clipping, optimizer; the tallies. What the graph records."""
        module = self.module
        optimizer = module.optimizers().optimizer
        batch = self.gather(rows, length)
        logits = module.net(batch.tokens, batch.lengths, capture=capture, one_length=True)
        loss = module.loss(logits, batch)
        # The rest outside the step's autocast (bf16-mixed), as Lightning's automatic step runs it: on the CPU the
        # backward runs in this thread, where the recurrence's hand-written backward would multiply in bf16.
        with torch.autocast(batch.tokens.device.type, enabled=False):
            optimizer.zero_grad(set_to_none=False)  # the graph's gradients are fixed tensors, written in place
            if capture:
                module.manual_backward(loss)  # Lightning's backward: the gradient-accumulation check's hooks run
            else:
                loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(module.parameters(), self.clip, foreach=True)
            optimizer.step()
        self.nonfinite |= ~torch.isfinite(loss.detach())
        self.loss_sum += loss.detach() * len(rows)
        self.correct += (logits.detach().argmax(-1) == batch.targets).sum()
        return loss.detach()

    def __call__(self, rows: torch.Tensor, length: int, capture: bool = False) -> torch.Tensor:
        """Train on one batch: row indices of names all `length` long. Returns the loss (a device tensor)."""
        key = (length, len(rows))
        lightning_optimizer = self.module.optimizers()
        # Lightning counts a manual step by these two calls (global_step, checkpoints, max_steps); the graph's
        # optimizer step bypasses its wrapper, so the count is kept here.
        lightning_optimizer._on_before_step()
        if capture or not self.use_graphs:
            loss = self.step_body(rows, length, capture)
        elif key in self.graphs:
            graph, static_rows, loss = self.graphs[key]
            static_rows.copy_(rows)
            graph.replay()
        elif self.seen[key] < WARMUP:
            self.seen[key] += 1
            loss = self.warm_up(rows, length)
        else:
            loss = self.capture(rows, length, key)
        lightning_optimizer._on_after_step()
        self.names, self.steps = self.names + len(rows), self.steps + 1
        if self.steps % self.check_every == 0:
            self.check_finite()
        return loss

    def warm_up(self, rows: torch.Tensor, length: int) -> torch.Tensor:
        """An eager step on a side stream, as capture asks: lazy allocations happen outside the graph's pool."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            loss = self.step_body(rows, length)
        torch.cuda.current_stream().wait_stream(side)
        return loss

    def capture(self, rows: torch.Tensor, length: int, key: tuple[int, int]) -> torch.Tensor:
        """Record this shape's step, then replay it on this batch (capture itself trains on nothing)."""
        static_rows = rows.clone()
        graph = torch.cuda.CUDAGraph()
        # Autocast's cache of cast weights must not outlive the capture (bf16-mixed).
        autocast = torch.is_autocast_enabled("cuda")
        dtype = torch.get_autocast_dtype("cuda")
        with torch.cuda.graph(graph), torch.autocast("cuda", dtype=dtype, enabled=autocast, cache_enabled=False):
            loss = self.step_body(static_rows, length)
        self.graphs[key] = (graph, static_rows, loss)
        graph.replay()
        return loss

    def check_finite(self) -> None:
        """The deferred check: one read-back every `check_every` steps instead of one per step."""
        if bool(self.nonfinite):
            raise FloatingPointError(
                f"non-finite training loss within the {self.check_every} steps up to step "
                f"{self.module.global_step}: the learning rate (model.optimizer.lr) is likely too high; lower it "
                "or set trainer.gradient_clip_val")

    def epoch_tallies(self) -> dict[str, torch.Tensor]:
        """The epoch's mean training loss and accuracy (one read-back), then the tallies start again."""
        self.check_finite()
        names = max(self.names, 1)
        tallies = {"train/loss_epoch": self.loss_sum / names, "train/acc": self.correct / names}
        self.loss_sum.zero_(), self.correct.zero_()
        self.names = 0
        return tallies


def applies(setting: str, trainer: Any) -> bool:
    """Whether this fit takes the fast path, as model.fast_path asks (auto: on one CUDA device), refusing the
    trainer settings it cannot honour. The caller then builds the Trainer without clipping (the step clips) and
    leaves the step to the module (manual optimization)."""
    one_cuda_device = trainer.world_size == 1 and trainer.strategy.root_device.type == "cuda"
    if setting == "off" or (setting == "auto" and not one_cuda_device):
        return False
    if trainer.world_size > 1:
        raise UserError(f"model.fast_path=on runs on one device, not {trainer.world_size}: use trainer=gpu or "
                        "model.fast_path=auto")
    if trainer.accumulate_grad_batches != 1:
        raise UserError(f"model.fast_path={setting} steps the optimizer every batch: drop "
                        f"trainer.accumulate_grad_batches={trainer.accumulate_grad_batches} or set model.fast_path=off")
    if trainer.gradient_clip_algorithm not in (None, "norm"):
        raise UserError(f"model.fast_path={setting} clips by norm: drop "
                        f"trainer.gradient_clip_algorithm={trainer.gradient_clip_algorithm} or set model.fast_path=off")
    return True
