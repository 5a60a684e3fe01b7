"""xrlhf: explain unsatisfactory RLHF responses by convex data selection, then unlearn (card ``xrlhf``)."""
