"""The fast path's contenders for benchmarks/benchmark.py on CUDA: one-length batches (as the fast path's loader
serves them, nameorigin.fit.graphed), each loop eager and captured as CUDA graphs, and torch's fused RNN on
the same batches."""

from __future__ import annotations

import argparse
import time
from importlib.util import find_spec

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.speed import FusedClassifier, alternate, char_rnn, make_batches, train_run
from nameorigin.model.cells import cell_spec


def graphed_train_run(model: nn.Module, batches: list[tuple], device: str, warmup: int = 2) -> float:
    """train_run's step (forward, loss, backward, AdamW) captured as a CUDA graph per batch shape and replayed, as
    the fast path does: batches of one length, a capturable optimizer. Capture happens in the first call; the
    rate is of replays once every shape has its graph (alternate's warm-up run captures them)."""
    graphs = model.__dict__.setdefault("_graphs", {})
    if "optimizer" not in graphs:
        graphs["optimizer"] = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-3, device=device),
                                                capturable=True)
    optimizer = graphs["optimizer"]

    def step(tokens: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(model(tokens, lengths, one_length=True), targets)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        return loss

    start = time.perf_counter()
    for tokens, lengths, targets in batches:
        key = tuple(tokens.shape)
        static = graphs.get(key)
        if static is None or isinstance(static, int):
            inputs = (tokens.to(device), lengths.to(device), targets.to(device))
            if (static or 0) < warmup:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    step(*inputs)
                torch.cuda.current_stream().wait_stream(side)
                graphs[key] = (static or 0) + 1
                continue
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step(*inputs)
            graphs[key] = static = (graph, inputs)
        graph, inputs = static
        for buffer, value in zip(inputs, (tokens, lengths, targets), strict=True):
            buffer.copy_(value, non_blocking=True)
        graph.replay()
    torch.cuda.synchronize()
    return sum(len(b[1]) for b in batches) / (time.perf_counter() - start)



def bench_fast_path(args: argparse.Namespace, names: list[str], vocab: int) -> dict:
    """On CUDA: the fast path's contenders on one-length batches (nameorigin.fit.graphed), fused torch on the
    same batches: the loops eager and captured as CUDA graphs, and the GRU's and LSTM's Triton loops where triton is."""
    batches = [tuple(t.to(args.device) for t in batch)
               for batch in make_batches(names, args.batch_size, args.batches, vocab, one_length=True)]
    results = {}
    for cell in args.cells.split(","):
        torch.manual_seed(0)
        impls = ["bptt", *(["triton"] if cell_spec(cell).triton and find_spec("triton") else [])]
        runs = {"fused torch": (FusedClassifier(cell, vocab, 18, args.hidden_size, args.embedding_dim), train_run)}
        for impl in impls:
            model = char_rnn(vocab, cell, args.hidden_size, args.embedding_dim, impl)
            runs[f"loop ({impl})"] = (model, train_run)
            runs[f"loop ({impl}, graphed)"] = (char_rnn(vocab, cell, args.hidden_size, args.embedding_dim, impl),
                                               graphed_train_run)
        for model, _ in runs.values():
            model.to(args.device)
        contenders = {name: (lambda m=m, run=run: run(m, batches, args.device)) for name, (m, run) in runs.items()}
        speeds = alternate(contenders, args.repeats)
        results[f"{cell}, one-length batches"] = {
            k: {"names_per_s": v, "vs_fused": v / speeds["fused torch"]} for k, v in speeds.items()}
    return results
