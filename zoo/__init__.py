"""zoo: a PyTorch Lightning module zoo of NeurIPS 2025 methods."""

__version__ = "0.1.0"
