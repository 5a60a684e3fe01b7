"""emergence: SGD on a two-layer Hermite student learning an additive power-law teacher (card ``emergence``)."""
