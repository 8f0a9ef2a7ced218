"""The front doors: `fitting.py` (`fit`), `predict.py` (prediction at new data),
`start.py` (a fit started from a saved run), `save.py` (what a fit leaves in its record).

Floor 5 of the inference rooms (ARCHITECTURE.md): imports every room below it.
"""
