"""A run's stages around the fit: its plan (settings resolved once, the starting point read once), the search, the
transfer candidate, the ensemble, the linear mix, calibration, the refit, and what the run leaves (outputs, card)."""
