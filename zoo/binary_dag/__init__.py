"""binary_dag: differentiable structure learning on binary data (card binary_dag)."""
