"""model.impl=triton against the reference cell, in Triton's interpreter on the CPU (TRITON_INTERPRET=1): where
triton is installed (the [triton] extra; `make test` installs it)."""

from __future__ import annotations

import os

import pytest
import torch

from nameorigin.config import ModelConfig
from nameorigin.model.cells import triton_cells
from nameorigin.model.charrnn import build_net

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="the interpreter runs on the CPU's tensors: conftest.py sets TRITON_INTERPRET=1")


def pair(hidden: int, cell: str = "gru", vocab: int = 11, classes: int = 4,
         directions: int = 1) -> tuple[torch.nn.Module, ...]:
    torch.manual_seed(0)
    reference, fused = (build_net(ModelConfig(cell=cell, impl=impl, hidden_size=hidden, embedding_dim=8,
                                              ngram_buckets=0, dropout=0.0, directions=directions), vocab, classes)
                        for impl in ("autograd", "triton"))
    fused.load_state_dict(reference.state_dict())
    return reference.train(), fused.train()


@pytest.mark.slow
@pytest.mark.parametrize("hidden, directions", [(16, 1), (128, 1), (16, 2)])  # 128: two tiles of 64 each way
@pytest.mark.parametrize("cell", triton_cells())
def test_the_fused_loop_matches_the_reference_cell_on_states_and_gradients(cell, hidden, directions):
    reference, fused = pair(hidden, cell, directions=directions)
    torch.manual_seed(1)
    lengths = torch.randint(1, 8, (21,))  # 21 names: a second program, partly empty; unsorted lengths
    tokens = torch.randint(2, 11, (21, int(lengths.max())))
    tokens[torch.arange(tokens.shape[1])[None, :] >= lengths[:, None]] = 0
    results = []
    for net in (reference, fused):
        net.zero_grad()
        state = net.encode(tokens, lengths)
        (state * torch.linspace(-1, 1, hidden * directions)).sum().backward()
        results.append((state.detach(), {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}))
    (expected, expected_grads), (state, grads) = results
    torch.testing.assert_close(state, expected, rtol=0, atol=1e-5)
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("cell", triton_cells())
def test_the_check_can_fail_a_wrong_recurrent_weight_shows(cell):
    reference, fused = pair(16, cell)
    with torch.no_grad():
        fused.cell.weight_hh[0, 0] += 0.5
    tokens, lengths = torch.randint(2, 11, (4, 6)), torch.full((4,), 6)
    with torch.no_grad():
        assert float((fused.encode(tokens, lengths) - reference.encode(tokens, lengths)).abs().max()) > 1e-3


def test_the_cpu_without_the_interpreter_is_refused_with_the_fix(monkeypatch):
    from nameorigin.base.errors import UserError

    _, fused = pair(16)
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(UserError, match="model.impl=triton runs on a CUDA device .* or model.impl=bptt on the CPU"):
        fused.encode(torch.randint(2, 11, (4, 6)), torch.full((4,), 6))
