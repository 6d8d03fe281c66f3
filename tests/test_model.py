from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from nameorigin.base.errors import UserError
from nameorigin.config import Cell, ModelConfig, NetConfig, TransferShape
from nameorigin.model.cells import CELLS
from nameorigin.model.charrnn import SHARED_WEIGHTS, CharRNN, build_net, cell_layout
from nameorigin.model.loops import reverse_within_length

EVERY_CELL = list(CELLS)  # the registry: a new cell is tested here without editing this file
IMPLS = ["autograd", "bptt"]  # model.impl=triton: tests/test_triton_loop.py, in the interpreter


def char_rnn(vocab_size: int, num_classes: int, known_names: int = 0, known_countries: int = 0,
             **settings) -> CharRNN:
    """A CharRNN from its config; no n-gram head and no dropout unless asked, so tests see the cell alone."""
    config = ModelConfig(**{"ngram_buckets": 0, "dropout": 0.0, **settings})
    transfer = TransferShape(known_names=known_names, known_countries=known_countries) if known_names else None
    return build_net(config, vocab_size, num_classes, transfer)


def batch(vocab: int = 12, lengths=(7, 3, 5, 1, 7, 2), seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    tokens = torch.randint(2, vocab, (len(lengths), int(lengths.max())), generator=gen)
    tokens[torch.arange(tokens.shape[1])[None, :] >= lengths[:, None]] = 0
    return tokens, lengths


def torch_names(directions: int, layers: int) -> dict[str, str]:
    """Each cell's torch suffix: "cell" -> "_l0", "cell_reverse" -> "_l0_reverse", "cell_l1" -> "_l1", ..."""
    return {name: f"_l{layer}" + ("_reverse" if backwards else "")
            for layer, names in enumerate(cell_layout(directions, layers)) for backwards, name in enumerate(names)}


@pytest.mark.parametrize("directions, layers", [(1, 1), (2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cell", EVERY_CELL)
def test_cell_loop_equals_torch_fused_rnn_on_outputs_and_gradients(cell, impl, directions, layers):
    """Against the cell's torch class with as many directions and layers: torch's backward direction also reads
    each packed name from its last character, and its layers above the first read the states below."""
    torch.manual_seed(0)
    model = char_rnn(12, 5, cell=cell, hidden_size=16, embedding_dim=8, impl=impl, directions=directions,
                     layers=layers)
    reference = CELLS[cell].torch_reference(8, 16, batch_first=True, bidirectional=directions == 2,
                                            num_layers=layers)
    suffix = torch_names(directions, layers)
    with torch.no_grad():
        for (name, ours), weight in itertools.product(model.named_cells(), SHARED_WEIGHTS):
            getattr(reference, weight + suffix[name]).copy_(getattr(ours, weight))
    tokens, lengths = batch()
    weights = torch.randn(len(lengths), 16 * directions)
    ours = model.encode(tokens, lengths)
    (ours * weights).sum().backward()
    packed = pack_padded_sequence(model.embedding(tokens), lengths, batch_first=True, enforce_sorted=False)
    _, final = reference(packed)
    final = final[0] if isinstance(final, tuple) else final  # (h, c) for a cell with memory
    theirs = torch.cat(list(final[-directions:]), dim=-1)  # the top layer's [directions, B, H] -> [B, 2H]
    (theirs * weights).sum().backward()
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    for (name, cell_module), weight in itertools.product(model.named_cells(), SHARED_WEIGHTS):
        torch.testing.assert_close(getattr(cell_module, weight).grad, getattr(reference, weight + suffix[name]).grad,
                                   atol=1e-5, rtol=0, msg=f"{name}.{weight}")


def test_reading_backwards_reverses_each_name_within_its_length():
    tokens, lengths = torch.tensor([[2, 3, 4, 0], [5, 6, 7, 8], [9, 0, 0, 0]]), torch.tensor([3, 4, 1])
    assert reverse_within_length(tokens, lengths).tolist() == [[4, 3, 2, 0], [8, 7, 6, 5], [9, 0, 0, 0]]


# A stack adds only bptt's every-step backward to check: autograd differentiates its own loop.
GRADCHECK_SHAPES = [(impl, *shape) for impl in IMPLS for shape in [(0, 1, 1), (4, 1, 1), (4, 2, 1)]]
GRADCHECK_SHAPES.append(("bptt", 4, 2, 2))


@pytest.mark.slow
@pytest.mark.parametrize("cell", EVERY_CELL)
@pytest.mark.parametrize("impl, embedding_dim, directions, layers", GRADCHECK_SHAPES)
def test_gradcheck_float64(cell, embedding_dim, impl, directions, layers):
    torch.manual_seed(0)
    model = char_rnn(6, 3, cell=cell, hidden_size=4, embedding_dim=embedding_dim, impl=impl,
                     directions=directions, layers=layers).double()
    tokens, lengths = batch(vocab=6, lengths=(4, 2, 3))
    params = [p for p in model.parameters()]

    def logits(*weights):
        state = dict(zip([n for n, _ in model.named_parameters()], weights, strict=True))
        return torch.func.functional_call(model, state, (tokens, lengths))

    assert torch.autograd.gradcheck(logits, tuple(p.detach().requires_grad_() for p in params))


@pytest.mark.parametrize("cell", EVERY_CELL)
@pytest.mark.parametrize("embedding_dim, directions, layers", [(0, 1, 1), (8, 1, 1), (8, 2, 1), (8, 2, 2)])
def test_inference_path_equals_the_training_path(cell, embedding_dim, directions, layers):
    """bptt.final_state (table gathers, tanh as 2 sigmoid(2x) - 1, folded biases) against the autograd loop; a
    stacked model's inference runs the bptt loop without a graph."""
    torch.manual_seed(3)
    model = char_rnn(12, 5, cell=cell, hidden_size=16, embedding_dim=embedding_dim, directions=directions,
                     layers=layers).eval()
    tokens, lengths = batch(lengths=(2, 7, 4, 7, 1, 5, 3, 7))
    reference = model(tokens, lengths)
    assert reference.requires_grad  # the autograd loop ran
    with torch.inference_mode():
        fast = model(tokens, lengths)
    torch.testing.assert_close(fast, reference.detach(), atol=2e-6, rtol=0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cell", EVERY_CELL)
def test_bf16_autocast_keeps_the_recurrence_in_float32(cell, impl):
    """trainer=gpu trains under bf16 autocast: the recurrent state must not be rounded to bf16 (nor crash
    bptt.py's float32 buffers, as the inference path once did on the GPU), while the heads may run in bf16."""
    torch.manual_seed(0)
    model = char_rnn(12, 5, cell=cell, hidden_size=16, embedding_dim=8, impl=impl, ngram_buckets=64)
    tokens, lengths = batch()
    for training in (True, False):
        model.train(training)
        with torch.set_grad_enabled(training):  # eval without grad: bptt.final_state, the path that crashed
            torch.manual_seed(1)  # the same dropout masks for both passes
            reference, reference_logits = model.encode(tokens, lengths), model(tokens, lengths)
            torch.manual_seed(1)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                mixed, logits = model.encode(tokens, lengths), model(tokens, lengths)
            torch.testing.assert_close(mixed, reference, atol=0, rtol=0)
            torch.testing.assert_close(logits.float(), reference_logits, atol=0.02, rtol=0.02)  # the bf16 head
            assert not torch.equal(logits.float(), reference_logits)  # autocast did reach the head
            if training:
                logits.float().sum().backward()
                assert model.cell.weight_hh.grad.dtype == torch.float32 and model.cell.weight_hh.grad.norm() > 0


def test_the_config_refuses_an_unknown_cell_or_impl_and_a_bad_size():
    with pytest.raises(UserError, match=f"model.cell='transformer' is not one of {', '.join(Cell)}$"):
        NetConfig(cell="transformer")
    with pytest.raises(UserError, match="model.impl='fast' is not one of autograd, bptt"):
        NetConfig(impl="fast")
    with pytest.raises(UserError, match="model.hidden_size=-3 must be a whole number >= 1"):
        NetConfig(hidden_size=-3)
    with pytest.raises(UserError, match=r"model.directions=3 must be 1 \(reading each name forwards\) or 2"):
        NetConfig(directions=3)


def test_the_question_linear_layer_used_twice():
    """A bias-free Linear(1,1) applied twice to x=10, MSE against y=5: dL/dw = 4 (w^2 x - y) w x."""
    layer = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(0.9472)
    x, y = torch.tensor([[10.0]]), torch.tensor([[5.0]])
    nn.functional.mse_loss(layer(layer(x)), y).backward()
    w = 0.9472
    assert layer.weight.grad.item() == pytest.approx(4 * (w**2 * 10 - 5) * w * 10, rel=1e-5)
    assert layer.weight.grad.item() == pytest.approx(150.48, abs=0.01)


def unrolled_contributions(model: CharRNN, tokens, lengths, weights):
    """Independent reference: one copy of each cell weight per distance-from-end, so copy d's .grad is the
    contribution of the uses at that distance."""
    cell, steps = model.cell, tokens.shape[1]
    copies = {n: getattr(cell, n).detach().clone().unsqueeze(0).repeat(steps, *[1] * getattr(cell, n).dim())
              .requires_grad_() for n in SHARED_WEIGHTS}
    x = model.embed(tokens).detach()
    h = c = x.new_zeros(len(lengths), cell.hidden_size)
    for t in range(steps):
        distance = (lengths - 1 - t).clamp(min=0)
        gi = torch.einsum("be,bge->bg", x[:, t], copies["weight_ih"][distance]) + copies["bias_ih"][distance]
        gh = torch.einsum("bh,bgh->bg", h, copies["weight_hh"][distance]) + copies["bias_hh"][distance]
        h_new, c_new = cell.step(gi, gh, h, c)
        keep = (t < lengths)[:, None]
        h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
    (model.head(h) * weights).sum().backward()
    return {n: c.grad for n, c in copies.items()}


@pytest.mark.parametrize("embedding_dim", [0, 8])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cell", EVERY_CELL)
def test_per_step_contributions_match_unrolled_copies_and_sum_to_grad(cell, impl, embedding_dim):
    torch.manual_seed(1)
    model = char_rnn(12, 5, cell=cell, hidden_size=16, embedding_dim=embedding_dim, impl=impl)
    tokens, lengths = batch()
    weights = torch.randn(len(lengths), 5)
    (model(tokens, lengths, capture=True) * weights).sum().backward()
    pieces = model.capture["cell"].contributions()
    reference = unrolled_contributions(model, tokens, lengths, weights)
    for name in SHARED_WEIGHTS:
        assert pieces[name].shape == (tokens.shape[1], *getattr(model.cell, name).shape)
        torch.testing.assert_close(pieces[name], reference[name], atol=1e-5, rtol=0)
        torch.testing.assert_close(pieces[name].sum(0), getattr(model.cell, name).grad, atol=1e-5, rtol=0)
    # The first character of the 7-letter names sits at distance 6: weight_ih is used there, while weight_hh
    # multiplies the zero initial state, so its contribution is exactly zero.
    assert pieces["weight_ih"][6].abs().sum() > 0 and pieces["weight_hh"][5].abs().sum() > 0
    assert pieces["weight_hh"][6].abs().sum() == 0


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cell", EVERY_CELL)
def test_each_cell_of_a_two_way_two_layer_model_splits_its_own_gradient_by_step(cell, impl):
    torch.manual_seed(1)
    model = char_rnn(12, 5, cell=cell, hidden_size=16, embedding_dim=8, impl=impl, directions=2, layers=2)
    tokens, lengths = batch()
    (model(tokens, lengths, capture=True) * torch.randn(len(lengths), 5)).sum().backward()
    assert set(model.capture) == {"cell", "cell_reverse", "cell_l1", "cell_l1_reverse"}
    for name, cell_module in model.named_cells():
        pieces = model.capture[name].contributions()
        for weight in SHARED_WEIGHTS:
            torch.testing.assert_close(pieces[weight].sum(0), getattr(cell_module, weight).grad, atol=1e-5, rtol=0)
        # Each cell's first step multiplies its zero initial state: for the 7-letter names, distance 6.
        assert pieces["weight_hh"][6].abs().sum() == 0 and pieces["weight_hh"][5].abs().sum() > 0
    forward, backward = (model.capture[name].contributions()["weight_ih"] for name in model.cell_names[:2])
    assert not torch.allclose(forward, backward)  # two cells, two sets of weights, two readings


def test_capture_is_off_by_default_and_does_not_change_results():
    torch.manual_seed(0)
    model = char_rnn(12, 5, hidden_size=8, embedding_dim=4)
    tokens, lengths = batch()
    plain = model(tokens, lengths)
    assert model.capture is None
    torch.testing.assert_close(model(tokens, lengths, capture=True), plain)


@pytest.mark.parametrize("directions, layers", [(1, 1), (2, 1), (2, 2)])
@pytest.mark.parametrize("cell", EVERY_CELL)
def test_bptt_equals_the_autograd_reference(cell, directions, layers):
    torch.manual_seed(2)
    reference = char_rnn(12, 5, cell=cell, hidden_size=16, embedding_dim=8, directions=directions, layers=layers)
    fast = char_rnn(12, 5, cell=cell, hidden_size=16, embedding_dim=8, impl="bptt", directions=directions,
                    layers=layers)
    fast.load_state_dict(reference.state_dict())
    tokens, lengths = batch(lengths=(2, 7, 4, 7, 1, 5, 3))
    weights = torch.randn(len(lengths), 5)
    for model in (reference, fast):
        (model(tokens, lengths) * weights).sum().backward()
    torch.testing.assert_close(fast(tokens, lengths), reference(tokens, lengths), atol=1e-6, rtol=0)
    for (name, a), b in zip(reference.named_parameters(), fast.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=0, msg=name)


def test_ngram_ids_count_every_window_and_ignore_padding():
    from nameorigin.model.ngram import ngram_ids

    tokens, lengths = batch(vocab=12, lengths=(7, 3, 1))
    ids, real = ngram_ids(tokens, lengths, 12, 4, 1000)
    # A name of L characters with start and end markers has L+2 unigrams, L+1 bigrams, L trigrams, L-1 4-grams.
    assert real.sum(1).tolist() == [4 * n + 2 for n in (7, 3, 1)]
    assert int(ids.min()) >= 0 and int(ids.max()) < 1000
    # The same name padded to another width hashes to the same n-grams.
    wider = torch.cat([tokens[1:2, :3], torch.zeros(1, 9, dtype=torch.long)], dim=1)
    again, real_again = ngram_ids(wider, lengths[1:2], 12, 4, 1000)
    assert sorted(again[real_again].tolist()) == sorted(ids[1][real[1]].tolist())


@pytest.mark.parametrize("hashing", ["polynomial", "mixed"])
def test_ngram_ids_are_the_hash_of_each_window_as_defined(hashing):
    """Each n follows from n - 1 in one step; the ids must still be the stated hash of each window, so a model
    trained before keeps its buckets: code_n = (n base^n + sum_o x_o base^(n-1-o)) mod PRIME, then the code mod
    buckets (polynomial), or floor(buckets * (code * 2654435769 mod 2^32) / 2^32) (mixed)."""
    from nameorigin.model.ngram import PRIME, ngram_ids

    vocab, max_n, buckets = 12, 4, 1000
    reduce = {"polynomial": lambda code: code % buckets,
              "mixed": lambda code: buckets * (code * 2654435769 % 2**32) // 2**32}[hashing]
    tokens, lengths = batch(vocab=vocab, lengths=(7, 3, 1))
    ids, real = ngram_ids(tokens, lengths, vocab, max_n, buckets, hashing=hashing)
    base, windows = vocab + 2, tokens.shape[1] + 2
    for row, length in enumerate(lengths.tolist()):
        framed = [vocab, *tokens[row, :length].tolist(), vocab + 1]
        expected = set()
        for n in range(1, max_n + 1):
            for i in range(len(framed) - n + 1):
                code = n
                for x in framed[i : i + n]:
                    code = (code * base + x) % PRIME
                expected.add((n, i, reduce(code)))
        found = {(k // windows + 1, k % windows, int(ids[row, k])) for k in real[row].nonzero().flatten().tolist()}
        assert found == expected


@pytest.mark.parametrize("vocab_size", [61, 302, 1150])
def test_the_mixed_hash_spreads_real_names_as_a_uniform_hash_would_whatever_the_vocabulary_size(vocab_size):
    """The tutorial names' 1-4-grams, read as if the vocabulary had `vocab_size` characters: with base 1,152
    (vocab 1,150: 2^7 x 9) the polynomial residue mod 2^14 forgets each window's first characters and packs 35k
    n-grams into a quarter of the buckets a uniform hash fills; the mixed hash fills what a uniform one would."""
    from nameorigin.base.textnorm import build_vocab, encode_names
    from nameorigin.data.corpus import read_corpus, shipped_corpus
    from nameorigin.model.ngram import ngram_ids

    names = sorted({name for name, _ in read_corpus(shipped_corpus())[0]})
    tokens, lengths = encode_names(names, {c: i for i, c in enumerate(build_vocab(names))})
    buckets = 16384
    distinct, real = ngram_ids(tokens.long(), lengths, vocab_size, 4, 2**30, hashing="polynomial")  # no collisions
    windows = distinct[real].unique()
    uniform = buckets * (1 - math.exp(-len(windows) / buckets))
    used = {hashing: len(ngram_ids(tokens.long(), lengths, vocab_size, 4, buckets, hashing=hashing)[0][real].unique())
            for hashing in ("mixed", "polynomial")}
    assert len(windows) > 30_000 and abs(used["mixed"] / uniform - 1) < 0.02, (used, uniform)
    if vocab_size == 1150:
        assert used["polynomial"] < 0.3 * uniform, (used, uniform)


def test_ngram_head_adds_to_logits_and_eval_applies_the_decision_layer():
    torch.manual_seed(0)
    model = char_rnn(12, 5, hidden_size=8, embedding_dim=4, ngram_buckets=64, ngram_max=3)
    tokens, lengths = batch()
    with torch.no_grad():
        model.ngram.weight.normal_()
        raw = model.train(False).readout(model.encode(tokens, lengths), tokens, lengths)
        model.logit_offset.copy_(torch.arange(5.0))
        model.temperature.fill_(2.0)
        torch.testing.assert_close(model(tokens, lengths), (raw + torch.arange(5.0)) / 2)
        without = char_rnn(12, 5, hidden_size=8, embedding_dim=4)
        without.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("ngram.")})
        plain = without.eval().readout(without.encode(tokens, lengths), tokens, lengths)
        torch.testing.assert_close(raw - plain, model.ngram(tokens, lengths))
    model.train()
    model(tokens, lengths).sum().backward()
    assert model.ngram.weight.grad.abs().sum() > 0


def test_ngram_dropout_leaves_out_n_grams_in_training_alone_and_keeps_the_sum_on_average():
    torch.manual_seed(0)
    model = char_rnn(12, 5, hidden_size=8, embedding_dim=4, ngram_buckets=64, ngram_max=3, ngram_dropout=0.5)
    tokens, lengths = batch()
    with torch.no_grad():
        model.ngram.weight.normal_()
        full = model.eval().ngram(tokens, lengths)
        assert torch.equal(model.ngram(tokens, lengths), full)  # evaluation and export read every n-gram
        model.train()
        draws = torch.stack([model.ngram(tokens, lengths) for _ in range(4000)])
    assert not torch.equal(draws[0], full) and not torch.equal(draws[0], draws[1])
    torch.testing.assert_close(draws.mean(0), full, atol=0.15, rtol=0.0)
    with pytest.raises(UserError, match="model.ngram_dropout"):
        NetConfig(ngram_dropout=1.0)


def test_logit_adjustment_offsets_by_the_log_prior():
    from nameorigin.fit.module import NameClassifier

    prior = [0.7, 0.2, 0.1]
    module = NameClassifier(ModelConfig(hidden_size=4, embedding_dim=2, logit_adjustment=0.5),
                            ["<pad>", "<unk>", "a"], ["A", "B", "C"], class_prior=prior)
    offset = module.net.logit_offset
    expected = torch.tensor([-0.5 * math.log(p) for p in prior])
    torch.testing.assert_close(offset, expected - expected.mean())
    with pytest.raises(UserError, match="class_prior"):
        NameClassifier(ModelConfig(logit_adjustment=0.5), ["<pad>", "<unk>", "a"], ["A", "B", "C"])


@pytest.mark.parametrize("evidence_hidden, solvable", [(0, False), (16, True)])
def test_the_evidence_hidden_layer_combines_countries(evidence_hidden, solvable):
    # Shares all in country 0 or all in country 1 mean language 0; shared half-half means language 1. The
    # logit difference of a linear evidence head is linear in s0 (s1 = 1 - s0), so it cannot get all three.
    torch.manual_seed(0)
    model = char_rnn(12, 2, hidden_size=4, embedding_dim=2, known_names=3, known_countries=2,
                    evidence_hidden=evidence_hidden)
    shares = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.5, 0.5, 1.0]])
    languages = torch.tensor([0, 0, 1])
    optimizer = torch.optim.Adam(model.transfer.evidence_head.parameters(), lr=0.05)
    for _ in range(300):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model.transfer.evidence_head(shares), languages).backward()
        optimizer.step()
    correct = int((model.transfer.evidence_head(shares).argmax(-1) == languages).sum())
    assert (correct == 3) == solvable, correct


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_the_fused_optimizer_gets_its_gradients_clipped(precision):
    # Lightning refuses to clip for a fused optimizer under any mixed precision (trainer=gpu is bf16-mixed);
    # NameClassifier clips itself when no float16 loss scaler is involved.
    import pytorch_lightning as pl

    from nameorigin.fit.module import NameClassifier

    model = NameClassifier(ModelConfig(hidden_size=8, embedding_dim=4), ["<pad>", "<unk>", "a", "b"], ["A", "B"])
    trainer = pl.Trainer(precision=precision, accelerator="cpu", gradient_clip_val=1.0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False)
    model.trainer = trainer
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 10.0)
    model.configure_gradient_clipping(optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
    norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert float(norm) == pytest.approx(1.0, rel=1e-4)


def test_one_field_added_to_the_schema_reaches_the_net_the_checkpoint_the_resume_check_and_the_card(tmp_path):
    """The model's settings are declared once: a new field, marked as shaping weights, needs no other edit."""
    import dataclasses

    from nameorigin.config import HEAD, plain, shape_fields
    from nameorigin.fit.module import NameClassifier
    from nameorigin.fit.resume import resolve_checkpoint
    from nameorigin.training.card import render

    Wider = dataclasses.make_dataclass("Wider", [("gate_scale", int, dataclasses.field(default=3, metadata=HEAD))],
                                       bases=(ModelConfig,))
    config = Wider(hidden_size=8, embedding_dim=4, ngram_buckets=0)
    module = NameClassifier(config, ["<pad>", "<unk>", "a", "b"], ["A", "B"])
    assert module.net.config.gate_scale == 3  # CharRNN is built from the config object itself
    path = tmp_path / "wider.ckpt"
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, path)
    stored = torch.load(path, weights_only=True)["hyper_parameters"]["config"]
    assert stored["gate_scale"] == 3 and stored == plain(config)
    assert "gate_scale" in shape_fields(config) and "gate_scale" not in shape_fields(config, "encoder")
    where = (str(path), tmp_path, "x")
    assert resolve_checkpoint(*where, config)[0] == str(path)  # the same settings resume
    with pytest.raises(UserError, match=r"model.gate_scale=4 \(checkpoint: 3\)"):
        resolve_checkpoint(*where, dataclasses.replace(config, gate_scale=4))
    resolve_checkpoint(*where, dataclasses.replace(config, impl="bptt", dropout=0.1))  # these shape no weight
    card = render(torch.load(path, weights_only=True), {}, {}, "python train.py")
    assert "gate_scale=3" in card


def test_a_checkpoint_from_before_the_typed_config_is_refused_in_one_line(tmp_path):
    from nameorigin.serving.predict import Predictor

    old = tmp_path / "old.ckpt"
    torch.save({"hyper_parameters": {"vocab": ["<pad>", "<unk>", "a"], "labels": ["A", "B"], "cell": "gru",
                                     "hidden_size": 8, "embedding_dim": 4}, "state_dict": {}}, old)
    with pytest.raises(UserError, match="predates nameorigin's typed model config .*: retrain it with this version"):
        Predictor.from_checkpoint(old)
