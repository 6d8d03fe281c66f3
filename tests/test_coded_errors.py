"""The gender-inference error metrics, on a case counted by hand."""

from __future__ import annotations

import pytest

from nameorigin.analysis.coded_errors import coded_errors


def test_the_four_metrics_on_a_hand_counted_case():
    # 4 women: 2 answered F, 1 answered M (fm), 1 unanswered; 4 men: 2 answered M, 1 answered F (mf), 1 unanswered
    truth = ["F", "F", "F", "F", "M", "M", "M", "M"]
    answers = ["F", "F", "M", None, "M", "M", "F", "andy"]
    metrics = coded_errors(truth, answers)
    assert metrics["errorCoded"] == pytest.approx(4 / 8)  # fm + mf + fu + mu
    assert metrics["errorCodedWithoutNA"] == pytest.approx(2 / 6)
    assert metrics["naCoded"] == pytest.approx(2 / 8)
    assert metrics["errorGenderBias"] == pytest.approx(0 / 6)
    assert coded_errors(["F", "M"], ["M", "M"])["errorGenderBias"] == pytest.approx(-1 / 2)
    with pytest.raises(ValueError):
        coded_errors(["F"], [])
