"""Bottom layer: the user-error type, atomic writes, text normalization, safe checkpoint reading."""
