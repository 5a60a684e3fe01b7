"""adam_sharpness: Adam reduces tr(diag(H)^{1/2}), not tr(H), on a diagonal linear net with label noise."""
