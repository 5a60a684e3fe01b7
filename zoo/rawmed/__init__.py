"""rawmed: multi-table time-series EHR generated from a residual-VQ latent space, and its evaluation framework."""
