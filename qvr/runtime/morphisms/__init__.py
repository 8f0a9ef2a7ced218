"""Runtime morphisms: the base classes, finite (tensor) morphisms and stochastic kernels.

* `base` — `Morphism` and the public `ContinuousMorphism` base class;
* `finite` — finite morphisms between finite sets (roles `latent`, `observed`, lookup-table
  kernels, `identity`, and their compositions, tensor products, daggers and repeats);
* `kernels` — `embed` (with learned positions, `positions=N`), family kernels
  (`kernel ~ Family`) and `discretize`;
* `attention` — `role=attention` (`Attention`: multi-head self-attention over the
  position axis) and `attention_layers` / `circuits` (design E2, E7);
* `norms` — the builtin expressions `layer_norm(A)`, `rms_norm(A)`, `residual(f)` (E4).

Combinators over continuous morphisms (`>>`, `@`, `fan`, `scan`) are in
`qvr.runtime.combinators`; programs in `qvr.runtime.monadic`.
"""
