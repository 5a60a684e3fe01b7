"""Sequential-decision data: tabular MDPs with behaviour trajectories, bandit graphs with arm sets."""
