"""Temporal graphs for link prediction: the seeded seen/unseen stream, on-disk readers, the datamodule."""
