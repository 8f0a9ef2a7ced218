"""The QVR runtime: compiles checked QVR modules to PyTorch modules and runs them.

Entry points: `load(path_or_source, data=None)` and `loads(source, data=None)` return a
`Program` (`qvr.runtime.program`).  Layout:

* `load` — front-end check, then compilation; errors (`qvr.runtime.errors`);
* `bind_sizes(program, data, sizes=None)` — a module whose objects take their sizes
  from the data (`object Child : FinSet N`) compiled with them (`qvr.runtime.sizes`);
* `compile`, `compile_program`, `letexpr` — from the typed module to runtime values;
* `objects`, `algebras`, `families`, `values` — objects, finite-morphism algebras, torch
  distributions per family, input coercion;
* `attention_layers(program)` -> `[(name, Attention)]` in order of application and
  `circuits(program)` -> `{name: {"qk": (H, dA, dA), "ov": (H, dB, dA)}}` (design E7;
  names are the morphism label, `label#i` for the copies `stack` makes);
* `morphisms/` (finite tensors, kernels, attention, norms), `combinators` (`>>`, `@`, fan, stack, repeat,
  scan), `steps` + `monadic` + `frame` + `marginal` (programs and their executor),
  `deduction` (deduction systems and charts), `program` (the loaded module).

This package imports torch; `import qvr` alone does not (see `qvr/__init__.py`).  The
inference algorithms (guides, SVI, MCMC, SMC) are not here: they build on
`MonadicProgram.execute`, `site_infos` and `log_joint`.
"""
from qvr.runtime import combinators as _combinators  # noqa: F401  (sets `>>`, `@`)
from qvr.runtime.errors import (CompileError, ParseError, QvrError, QvrRuntimeError)
from qvr.runtime.load import load, loads
from qvr.runtime.morphisms.attention import attention_layers, circuits
from qvr.runtime.program import Program
from qvr.runtime.load import bind_sizes
from qvr.runtime.sizes import SizeError

__all__ = ["load", "loads", "Program", "CompileError", "ParseError", "QvrError",
           "QvrRuntimeError", "attention_layers", "circuits", "bind_sizes", "SizeError"]
