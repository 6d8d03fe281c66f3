"""Analysis: held-out evaluation, the paired comparison with the n-gram baseline, benchmark contenders."""
