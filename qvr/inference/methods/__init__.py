"""The loops of each method behind `qvr.inference.fit`: `svi.py`, `mcmc.py` (the `MCMC`
driver with `HMCKernel`/`NUTSKernel`), `smc.py` (`SMCSteering` over a `ProgramLM`),
`prior.py` (the prior predictive), `laplace.py` (``--guide map``/``laplace``, run from
`svi.py`), `circuits.py` (the attention circuits a fit records), and
their contract with `fit`, `fit_result.py` (`FitContext` in, `FitResult` out).

Each ``run(ctx: FitContext) -> FitResult`` reports steps through ``ctx.report`` and never
reports the start or the end of the fit: `fit` does (`qvr.inference.front.fitting`, a floor
above; ARCHITECTURE.md, "Inference rooms").
"""
