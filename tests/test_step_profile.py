"""Where a training step's time goes (nameorigin.training.step_profile, `debug=step_profile`): a real run clocks
its steps by phase, profiles the next ones, and sorts the operators' time into kinds that add up."""

from __future__ import annotations

import json

import pytest
from conftest import TINY, run_dirs, train

from nameorigin.training.step_profile import PHASES, kind_of


def test_operators_are_sorted_by_what_they_are():
    assert kind_of("aten::addmm") == kind_of("aten::mm") == "products"
    assert kind_of("aten::embedding_dense_backward") == "ngram_table"
    assert kind_of("aten::_fused_adamw_") == "optimizer_kernels"
    assert kind_of("aten::sigmoid") == "elementwise"
    # A named range is not an operator: its own time is the interpreter's between operators.
    assert kind_of("Optimizer.step#AdamW.step") == kind_of("CellLoopBackward") == "python"


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["autograd", "bptt"])
def test_a_run_under_debug_step_profile_says_where_its_steps_went(tiny_corpus, tmp_path, impl):
    result = train(tmp_path, f"data.root={tiny_corpus}", *TINY, "debug=step_profile", f"model.impl={impl}")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    report = json.loads((run / "step_profile.json").read_text())
    assert report["steps"] >= 1 and report["names"] >= report["steps"] and report["names_per_s"] > 0
    assert set(report["phases"]) == set(PHASES) and sum(report["phases"].values()) == pytest.approx(1, abs=0.01)
    assert sum(report["operators"].values()) == pytest.approx(1, abs=0.01)
    assert report["operators"]["products"] > 0 and report["operators"]["elementwise"] > 0
    assert report["operator_calls_per_step"] > 10  # a loop over characters: many small operators a step
    line = next(line for line in (run / "train.log").read_text().splitlines() if "step profile: " in line)
    assert f"{report['steps']} steps at {report['names_per_s']:.0f} names/s" in line
