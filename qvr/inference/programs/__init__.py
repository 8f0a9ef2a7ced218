"""What inference fits: the latent-site registry and its flat layout (`sites.py`), an
exported morphism as a program (`morphism_fit.py`), lifts over a model's parameters
(`lifts.py`).

Floor 2 of the inference rooms (ARCHITECTURE.md): imports floor 1 only.
"""
