"""The loops of each method behind `qvr.inference.fit`: `svi.py`, `mcmc.py` (the `MCMC`
driver with `HMCKernel`/`NUTSKernel`), `smc.py` (`SMCSteering` over a `ProgramLM`), and
`save.py` (what a finished, cancelled or failed fit leaves in its run record).

Each ``run(ctx: FitContext) -> FitResult`` reports steps through ``ctx.report`` and never
reports the start or the end of the fit: `fit` does.
"""
