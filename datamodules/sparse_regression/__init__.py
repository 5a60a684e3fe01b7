"""Sparse linear regression: a k-sparse w*, inputs Z, clean labels y = Z w* (card ``adam_sharpness``)."""
