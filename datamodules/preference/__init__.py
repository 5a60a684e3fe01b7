"""Preference data (``xrlhf``): comparisons as features or token pairs, their on-disk readers, planted truth."""
