"""MoE-CAP: sparse MoE cost, accuracy and performance metrics (card ``moe_cap``).

``zoo.moe_cap.radar(systems_json)`` redraws the CAP radar from saved records; it is resolved lazily, so importing the
package imports neither torch nor matplotlib.
"""

from __future__ import annotations

from typing import Any

__all__ = ["radar"]


def __getattr__(name: str) -> Any:
    if name == "radar":
        from zoo.moe_cap.cap_radar import radar

        globals()["radar"] = radar  # later look-ups skip this hook
        return radar
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
