"""Multi-objective test problems with utilities, a probit decision maker and recorded comparisons (BOPE)."""
