"""Fits over several processes of a torchrun launch: `world.py` (the process group, what
the ranks share).  Chain groups over the ranks are MCMC's (`qvr.inference.mcmc.distributed`).

Floor 1 of the inference rooms (ARCHITECTURE.md): imports no other room.
"""
