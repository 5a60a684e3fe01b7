"""bope_monne: Bayesian optimisation with preference exploration using a monotone neural-network ensemble."""
