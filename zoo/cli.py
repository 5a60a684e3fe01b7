"""The historical import path of the ``zoo`` command's LightningCLI.

It lives in :mod:`zoo.core.cli`, so the core's reproduction harness runs fits without importing anything above it.
"""

from zoo.core.cli import ZooCLI, main, print_metrics, train_recipe

__all__ = ["ZooCLI", "main", "print_metrics", "train_recipe"]
