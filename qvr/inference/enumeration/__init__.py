"""Finite latents summed out exactly (`enumerate.py`) and their posterior recovered
afterwards (`discrete.py`, `infer_discrete`).

Floor 1 of the inference rooms (ARCHITECTURE.md): imports no other room.
"""
