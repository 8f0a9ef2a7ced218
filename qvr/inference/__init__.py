"""Inference for compiled QVR programs (SVI, HMC/NUTS, lifts) and the fit event API.

Only `qvr.inference.events` is importable without torch; the rest loads torch lazily.
"""
