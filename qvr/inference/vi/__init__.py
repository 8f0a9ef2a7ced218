"""Variational inference: `guides.py` (`AutoNormalGuide`), `elbo.py` (`ELBO`), `svi.py`
(`SVI`, `adam`), `mode_search.py` and `laplace.py` (MAP and the Laplace approximation).

Floor 3 of the inference rooms (ARCHITECTURE.md): imports floors 1-2, never `mcmc/`.
"""
