"""What is computed from a fit's draws: convergence diagnostics and summaries
(`diagnostics.py`), the pointwise log-likelihood and replicates (`pointwise.py`), PSIS-LOO,
predictive checks and comparisons (`checks.py`), recorded quantities (`recorded.py`).

Floor 2 of the inference rooms (ARCHITECTURE.md): imports floor 1 only.  `checks.py` and
`diagnostics.py` are torch-free (the dashboard imports them), and so is this file.
"""
