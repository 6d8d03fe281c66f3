"""Corpus readers, the leakage-free split, length-bucketed batches, and the shipped tutorial corpus."""
