"""How a served model is judged against the baselines on its own split: the TF-IDF and hashed n-gram baselines,
the n-gram linear model fitted alone, and the paired margin."""
