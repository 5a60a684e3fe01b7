"""Binary (and native multi-state) data for causal discovery: the MVB generator, packaged bnlearn networks, CSV."""
