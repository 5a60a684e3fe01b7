"""avg_reward_q: average-reward Q-learning with adaptive (local-clock) stepsizes (card ``avg_reward_q``)."""
