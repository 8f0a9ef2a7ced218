"""Variational inference: `guides.py` (`AutoNormalGuide`), `elbo.py` (`ELBO`), `svi.py`
(`SVI`, `adam`).

Floor 3 of the inference rooms (ARCHITECTURE.md): imports floors 1-2, never `mcmc/`.
"""
