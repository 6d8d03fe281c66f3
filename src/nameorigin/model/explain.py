"""Why a name got its label: the chosen label's score split into one contribution per character, one per n-gram
of the n-gram head and one for the known-name evidence, adding up to the score minus a baseline.

The score is the chosen label's decided logit (after logit adjustment and temperature, as served) minus the mean
decided logit over all labels. The softmax ignores a shift of every logit by one constant, so one label's raw
logit carries a part that means nothing; the centred logit does not, and it is still linear in the logits, so
every additive part of the model (the n-gram head, the evidence, the decision layer's offset) stays an exact
term of it.

Characters: the head applied to the state after each character gives the score the name would have if it ended
there; those scores telescope, score(h_L) - score(h_0) = sum over t of [score(h_t) - score(h_t-1)], one term per
use of the shared cell, from one forward pass. It is the inference-time twin of the gradient's per-timestep
contributions (nameorigin.model.capture). Each term is what reading that character changed, given the ones
before it. Every term is exact, with no sampling and no path integral. The order matters: a name's
last letters carry what the earlier ones set up.

The baseline is what every name shares: the head on the empty state, the decision layer's offset, and the n-gram
head's start and end markers (every name has one of each). The residual is the served score minus baseline and
parts: the states here come from the cell's reference step, the served score from the fast inference loop, so
the residual checks one against the other, as the gradient check does.

Name by name (NameExplanation, for the Predictor, the command and the dashboard), each character also gets a
total: its own term plus an equal share of every n-gram that covers it. The totals add up to the same sum, and
mark a name's strongest characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from nameorigin.base.errors import UserError
from nameorigin.base.parts import BOUNDARY
from nameorigin.model.charrnn import batch_tokens
from nameorigin.model.ensemble import Ensemble
from nameorigin.model.loops import autograd_loop
from nameorigin.model.ngram import ngram_ids

# The character terms telescope along one reading order; a name read both ways has no single order to split along.
NOT_TWO_WAY = ("--explain splits a score along one reading order, and this model reads each name both ways "
               "(model.directions=2): explain with a model trained with model.directions=1")


def explainable(net) -> bool:
    """The model reads each name in one order (any number of layers), along which its character terms telescope."""
    return all(len(names) == 1 for names in net.layer_names)


@dataclass
class Explained:
    """One batch's explanation, for the label `label[i]` of each name i."""

    label: torch.Tensor  # [B] the label explained (the top prediction unless given)
    score: torch.Tensor  # [B] its centred decided logit, as the model serves it
    baseline: torch.Tensor  # [B]
    characters: torch.Tensor  # [B, T] one contribution per character (0 past a name's end)
    ngrams: torch.Tensor | None  # [B, K] one per n-gram window (0 where not real, and for the two markers)
    ngram_windows: list[tuple[int, int]]  # (n, first framed position) of each of the K columns
    evidence: torch.Tensor | None  # [B] the known-name evidence of a fine-tuned model
    residual: torch.Tensor  # [B] score - (baseline + every part)


def states_after_each_character(net, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[B, T + 1, H]: the empty state, then the top layer's state after each character, frozen after a name's
    end: the autograd loop, each cell's own reference step (RecurrentCell.step), layer by layer. A one-way
    layer's state after a character depends only on the characters up to it, so prefixes stay prefixes."""
    inputs = tokens
    for (name,) in net.layer_names:
        inputs = autograd_loop(net, getattr(net, name), inputs, lengths, None, every_step=True)
    return torch.cat([inputs.new_zeros(inputs.shape[0], 1, inputs.shape[2]), inputs], dim=1)


def head_logits(net, states: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The recurrent head's raw logits from every state [B, S, H] -> [B, S, labels]. A fine-tuned model's
    pretrained country head reads each state too; its n-gram input is the whole name's, held fixed."""
    features, parts = states, net.transfer
    if parts is not None and parts.source_head is not None:
        source = parts.source_head(states)
        if parts.source_ngram is not None:
            source = source + parts.source_ngram(parts.as_pretrained(tokens), lengths,
                                                 net.boundaries(tokens))[:, None, :]
        features = torch.cat([states, source.softmax(-1)], dim=-1)
    return net.head(features)


def centred(logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """logits[..., label] - mean over labels; logits [B, ..., labels], label [B]."""
    index = label.view(-1, *([1] * (logits.dim() - 1))).expand(*logits.shape[:-1], 1)
    return logits.gather(-1, index).squeeze(-1) - logits.mean(-1)


@torch.no_grad()
def explain_batch(net, tokens: torch.Tensor, lengths: torch.Tensor, label: torch.Tensor | None = None) -> Explained:
    """Contributions to each name's label (default: its top prediction) in an eval-mode CharRNN or Ensemble."""
    if not explainable(net):
        raise UserError(NOT_TWO_WAY)
    if isinstance(net, Ensemble):
        return explain_ensemble(net, tokens, lengths, label)
    served = net(tokens, lengths)  # decided logits, through the serving loop
    label = served.argmax(-1) if label is None else label.to(tokens.device)
    scale = 1.0 / net.temperature
    per_state = centred(head_logits(net, states_after_each_character(net, tokens, lengths), tokens, lengths),
                        label) * scale  # [B, T + 1]: the score after each character
    characters = per_state[:, 1:] - per_state[:, :-1]  # 0 after a name's end: the state is frozen there
    baseline = per_state[:, 0] + centred(net.logit_offset.expand(len(label), -1), label) * scale
    ngrams, windows = None, []
    if net.ngram is not None:
        ngram = net.ngram
        ids, real = ngram_ids(tokens, lengths, ngram.vocab_size, ngram.max_n, ngram.buckets, net.boundaries(tokens),
                              ngram.hashing)
        steps = tokens.shape[1] + 2
        windows = [(n, start) for n in range(1, ngram.max_n + 1) for start in range(steps)]
        weights = F.embedding(ids, ngram.weight)  # [B, K, labels]
        each = centred(weights, label) * scale * real
        ends = (lengths.to(tokens.device) + 1)[:, None]
        position = torch.tensor([start for _, start in windows], device=tokens.device)[None, :]
        marker = torch.tensor([n == 1 for n, _ in windows], device=tokens.device)[None, :] & (
            (position == 0) | (position == ends))  # the start and end markers alone: every name has them
        baseline = baseline + (each * marker).sum(1)
        ngrams = each * ~marker
    evidence = None
    if net.transfer is not None and net.transfer.known is not None:
        evidence = centred(net.transfer.evidence(tokens, lengths, net.boundaries(tokens)), label) * scale
    total = baseline + characters.sum(1)
    total = total + (ngrams.sum(1) if ngrams is not None else 0) + (evidence if evidence is not None else 0)
    score = centred(served, label)
    return Explained(label, score, baseline, characters, ngrams, windows, evidence, score - total)


def explain_ensemble(net: Ensemble, tokens: torch.Tensor, lengths: torch.Tensor,
                     label: torch.Tensor | None) -> Explained:
    """The members' explanations of the ensemble's label, averaged (the ensemble's raw logits are their mean; their
    own decision layers are neutral), then through the ensemble's decision layer."""
    served = net(tokens, lengths)
    label = served.argmax(-1) if label is None else label.to(tokens.device)
    each = [explain_batch(member, tokens, lengths, label) for member in net.members]
    scale = 1.0 / net.temperature

    def mean(field: str) -> torch.Tensor | None:
        parts = [getattr(explained, field) for explained in each]
        return None if parts[0] is None else torch.stack(parts).mean(0) * scale

    baseline = mean("baseline") + centred(net.logit_offset.expand(len(label), -1), label) * scale
    characters, ngrams, evidence = mean("characters"), mean("ngrams"), mean("evidence")
    total = baseline + characters.sum(1) + (ngrams.sum(1) if ngrams is not None else 0) + \
        (evidence if evidence is not None else 0)
    score = centred(served, label)
    return Explained(label, score, baseline, characters, ngrams, each[0].ngram_windows, evidence, score - total)


def ngram_text(name: str, n: int, start: int) -> str:
    """The n-gram of window (n, start) over '^' + name + '$'."""
    framed = "^" + name + "$"
    return framed[start : start + n]


def ngram_span(name: str, n: int, start: int) -> range:
    """The name's character positions an n-gram covers (the markers cover none)."""
    return range(max(start - 1, 0), min(start - 1 + n, len(name)))


SHOWN = 5  # parts in a table cell and in the text line


@dataclass(slots=True)
class NameExplanation:
    label: str  # the label explained: the top prediction
    score: float  # its centred decided logit
    baseline: float
    residual: float
    parts: list[tuple[str, str, float]] = field(default_factory=list)  # (kind, part, contribution), characters first
    by_character: list[float] = field(default_factory=list)  # each character's total, n-gram shares included
    spans: list[tuple[int, int]] = field(default_factory=list)  # each part's [start, stop) over the name
    # A name of parts (nameorigin.base.parts): each part's characters' totals (a boundary counts with the part it
    # opens), the family part's with the known-name evidence, which is looked up by it; named by the Predictor.
    by_name_part: list[float] = field(default_factory=list)
    name_part_names: list[str] = field(default_factory=list)

    def strongest(self, count: int = SHOWN) -> list[tuple[str, str, float]]:
        return sorted(self.parts, key=lambda part: -abs(part[2]))[:count]

    def as_dict(self) -> dict:
        return {"explained": self.label, "explanation_score": round(self.score, 6),
                "explanation_baseline": round(self.baseline, 6),
                "explanation": [{"part": part, "kind": kind, "span": list(span), "contribution": round(value, 6)}
                                for (kind, part, value), span in zip(self.parts, self.spans, strict=True)],
                "explanation_by_character": [round(value, 6) for value in self.by_character],
                "explanation_residual": float(f"{self.residual:.3g}"),
                **({"explanation_by_name_part": dict(zip(self.part_labels, (round(v, 6) for v in self.by_name_part),
                                                         strict=True))} if self.by_name_part else {})}

    @property
    def part_labels(self) -> list[str]:
        return self.name_part_names or [f"part{k + 1}" for k in range(len(self.by_name_part))]

    def compact(self, count: int = SHOWN) -> str:
        """The strongest parts, for a table cell and the text line: `"ura$" +1.92, r(7) +0.81` (a character
        with its 1-based position, an n-gram in quotes)."""
        position = {id(part): i + 1 for i, part in enumerate(self.parts) if part[0] == "character"}
        shown = []
        for part in self.strongest(count):
            kind, text, value = part
            label = f"{text}({position[id(part)]})" if kind == "character" else \
                f'"{text}"' if kind == "ngram" else text
            shown.append(f"{label} {value:+.2f}")
        by_part = [f"{part} {value:+.2f}" for part, value in zip(self.part_labels, self.by_name_part, strict=True)]
        return ", ".join(shown) + (f" ({', '.join(by_part)})" if by_part else "")

    def marked(self, name: str, count: int = 2) -> str:
        """The name with its strongest characters (by total, towards the label) in brackets: Nakamu[r][a]."""
        ranked = sorted(range(len(name)), key=lambda i: -self.by_character[i])
        top = {i for i in ranked[:count] if self.by_character[i] > 0}
        return "".join(f"[{c}]" if i in top else c for i, c in enumerate(name))


def by_name_part(name: str, totals: Sequence[float], evidence: float | None) -> list[float]:
    """Each part's share of the explanation (empty for a name of one string)."""
    if BOUNDARY not in name:
        return []
    sums, part = [0.0] * (name.count(BOUNDARY) + 1), 0
    for char, total in zip(name, totals, strict=True):
        part += char == BOUNDARY
        sums[part] += total
    sums[-1] += evidence or 0.0
    return sums


def explain_names(net, encoded: Sequence[Sequence[int]], names: Sequence[str], labels: Sequence[str],
                  batch_size: int, scale: float = 1.0) -> list[NameExplanation]:
    """One explanation per encoded name (`names`: the normalized strings the codes spell). `scale` multiplies every
    score (the Predictor's undo of the temperature for --uncalibrated)."""
    results: list[NameExplanation | None] = [None] * len(encoded)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        tokens, lengths = batch_tokens([encoded[i] for i in rows], next(net.parameters()).device)
        explained = explain_batch(net, tokens, lengths)
        characters = (explained.characters * scale).cpu().tolist()
        ngrams = None if explained.ngrams is None else (explained.ngrams * scale).cpu()
        evidence = None if explained.evidence is None else (explained.evidence * scale).cpu().tolist()
        for b, i in enumerate(rows):
            name = names[i]
            parts = [("character", char, characters[b][t]) for t, char in enumerate(name)]
            spans = [(t, t + 1) for t in range(len(name))]
            totals = characters[b][: len(name)]
            if ngrams is not None:
                nonzero = ngrams[b].nonzero().flatten().tolist()
                for k, value in zip(nonzero, ngrams[b, nonzero].tolist(), strict=True):
                    n, first = explained.ngram_windows[k]
                    parts.append(("ngram", ngram_text(name, n, first), value))
                    span = ngram_span(name, n, first)
                    spans.append((span.start, span.stop))
                    for t in span:
                        totals[t] += value / len(span)
            if evidence is not None:
                parts.append(("known name", "known name", evidence[b]))
                spans.append((0, len(name)))
            results[i] = NameExplanation(labels[int(explained.label[b])], float(explained.score[b]) * scale,
                                         float(explained.baseline[b]) * scale, float(explained.residual[b]) * scale,
                                         parts, totals, spans, by_name_part(name, totals, evidence and evidence[b]))
    return results
