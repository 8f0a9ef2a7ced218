"""The data of a fit: sources, split into input and observations, the one check,
synthetic data (`fit_data.py`); the data as rows in minibatches (`minibatch.py`).

Floor 2 of the inference rooms (ARCHITECTURE.md): imports floor 1 only.
"""
