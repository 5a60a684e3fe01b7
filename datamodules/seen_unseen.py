"""Old path ``datamodules.seen_unseen``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.temporal_graph.synthetic``
"""

from datamodules.temporal_graph.synthetic import (
    JODIE_HEADER,
    BayesOracle,
    SeenUnseenStream,
    seen_unseen_stream,
    validate_generator_args,
)

__all__ = ["BayesOracle", "JODIE_HEADER", "seen_unseen_stream", "SeenUnseenStream", "validate_generator_args"]
