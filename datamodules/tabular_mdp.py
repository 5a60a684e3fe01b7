"""Old path ``datamodules.tabular_mdp``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.decision.mdp``
- ``datamodules.decision.mdp_datamodule``
- ``datamodules.decision.mdp_files``
- ``datamodules.decision.trajectories``
"""

from datamodules.decision.mdp import ROW_TOL, check_mdp, ground_truth, random_mdp
from datamodules.decision.mdp_datamodule import GAP_TRIES, Behaviour, TabularMDPDataModule, log
from datamodules.decision.mdp_files import from_gymnasium_P, from_mdptoolbox, load_npz, npz_shape, save_npz
from datamodules.decision.trajectories import ChunkStream, TrajectorySampler

__all__ = [
    "Behaviour",
    "check_mdp",
    "ChunkStream",
    "from_gymnasium_P",
    "from_mdptoolbox",
    "GAP_TRIES",
    "ground_truth",
    "load_npz",
    "log",
    "npz_shape",
    "random_mdp",
    "ROW_TOL",
    "save_npz",
    "TabularMDPDataModule",
    "TrajectorySampler",
]
