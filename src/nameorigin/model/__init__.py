"""CharRNN and its parts: the cell (one statement of its equations), loops, capture, heads, calibration maths."""
