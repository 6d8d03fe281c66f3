"""Matplotlib figures for TensorBoard: confusion matrix, gradient heatmap, running-sum curves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # figures are rendered to images for TensorBoard, never shown

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402


def figure_to_writer(writer: Any, tag: str, figure: plt.Figure, step: int) -> None:
    writer.add_figure(tag, figure, global_step=step, close=True)


def confusion_figure(matrix: torch.Tensor, labels: Sequence[str], title: str) -> plt.Figure:
    """Rows (true language) normalized to 1, so rare languages are as readable as common ones."""
    counts = matrix.double().cpu()
    rates = counts / counts.sum(1, keepdim=True).clamp_min(1)
    size = min(2 + 0.45 * len(labels), 16)  # 105 countries still make a readable image
    figure, axes = plt.subplots(figsize=(size, size))
    axes.imshow(rates.numpy(), cmap="Blues", vmin=0, vmax=1)
    font = 8 if len(labels) <= 30 else 4
    axes.set_xticks(range(len(labels)), labels, rotation=90, fontsize=font)
    axes.set_yticks(range(len(labels)), labels, fontsize=font)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(title)
    cells = torch.cartesian_prod(torch.arange(len(labels)), torch.arange(len(labels))).tolist()
    for (row, col), value in zip(cells, rates.flatten().tolist(), strict=True):
        if value >= 0.005 and len(labels) <= 30:  # numbers in cells only while they stay legible
            axes.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=6,
                      color="white" if value > 0.5 else "black")
    figure.tight_layout()
    return figure


def heatmap_figure(steps: Sequence[int], rows: dict[str, list[torch.Tensor]], width: int) -> plt.Figure:
    """Training step (y) x distance from the last character (x), colour = share of that step's gradient norm."""
    figure, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.5), squeeze=False)
    for ax, (name, norms) in zip(axes[0], rows.items(), strict=True):
        grid = torch.zeros(len(norms), width)
        for i, row in enumerate(norms):
            grid[i, : len(row)] = row / row.sum().clamp_min(1e-30)
        image = ax.imshow(grid.numpy(), aspect="auto", origin="lower", cmap="viridis",
                          extent=(-0.5, width - 0.5, steps[0], steps[-1] + 1))
        ax.set_title(name)
        ax.set_xlabel("distance from last character")
        ax.set_ylabel("training step")
        figure.colorbar(image, ax=ax, fraction=0.046)
    figure.tight_layout()
    return figure


def partial_sum_figure(curves: dict[str, torch.Tensor], step: int) -> plt.Figure:
    """||sum of contributions of the last k+1 characters|| / ||.grad||: the accumulation reaching 1."""
    figure, ax = plt.subplots(figsize=(5, 3.5))
    for name, curve in curves.items():
        ax.plot(range(len(curve)), curve.numpy(), marker="o", markersize=3, label=name)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("characters added, from the last one (k)")
    ax.set_ylabel("||partial sum|| / ||grad||")
    ax.set_title(f"running sum of per-step gradients, step {step}")
    ax.legend(fontsize=7)
    figure.tight_layout()
    return figure


def reliability_figure(curves: dict[str, dict[str, list[float]]], title: str) -> plt.Figure:
    """Accuracy against confidence per bin, one curve per setting (e.g. before/after temperature scaling);
    the diagonal is perfect calibration. Empty bins are left out."""
    figure, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=0.8)
    for name, curve in curves.items():
        points = [(c, a) for c, a, n in zip(curve["confidence"], curve["accuracy"], curve["count"], strict=True) if n]
        ax.plot([c for c, _ in points], [a for _, a in points], marker="o", markersize=3, label=name)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence (top probability)")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.legend(fontsize=7)
    figure.tight_layout()
    return figure


def label_report_figure(rows: Sequence[dict], level: float) -> plt.Figure:
    """Per label (nameorigin.model.label_report): recall with its 95 % interval, and how often the label's names'
    prediction sets hold it, each kind of set with its interval, against the level asked (dashed)."""
    height = 0.9 + 0.28 * len(rows)
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, height), sharey=True)
    places = list(range(len(rows)))[::-1]
    kinds = [kind for kind in ("marginal", "mondrian") if rows and f"set_coverage_{kind}" in rows[0]]
    panels = [(left, [("recall", "recall")], "recall (95 % interval)"),
              (right, [(f"set_coverage_{kind}", kind) for kind in kinds], f"{level * 100:g} % set holds the label")]
    for ax, series, title in panels:
        for shift, (key, name) in enumerate(series):
            points = [(y + 0.15 * shift, row[key], row[f"{key}_95"]) for y, row in zip(places, rows, strict=True)
                      if row[key] is not None]
            if points:
                ys, values, bounds = zip(*points, strict=True)
                errors = [[max(0.0, v - b[0]) for v, b in zip(values, bounds, strict=True)],
                          [max(0.0, b[1] - v) for v, b in zip(values, bounds, strict=True)]]
                ax.errorbar(values, ys, xerr=errors, fmt="o", markersize=3, capsize=2, label=name)
        ax.set_xlim(0, 1.02)
        ax.set_title(title, fontsize=9)
    right.axvline(level, color="grey", linestyle="--", linewidth=0.8)
    if len(kinds) > 1:
        right.legend(fontsize=7, loc="lower left")
    left.set_yticks(places, [f"{row['label']} ({row['test_names']})" for row in rows], fontsize=7)
    figure.tight_layout()
    return figure
