"""Serving: the Predictor (checkpoints and exported programs), export, tables."""
