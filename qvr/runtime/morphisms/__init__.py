"""Runtime morphisms: the base classes, finite (tensor) morphisms and stochastic kernels.

* `base` — `Morphism` and the public `ContinuousMorphism` base class;
* `finite` — finite morphisms between finite sets (roles `latent`, `observed`, lookup-table
  kernels, `identity`, and their compositions, tensor products, daggers and repeats);
* `kernels` — `embed`, family kernels (`kernel ~ Family`) and `discretize`.

Combinators over continuous morphisms (`>>`, `@`, `fan`, `scan`) are in
`qvr.runtime.combinators`; programs in `qvr.runtime.monadic`.
"""
