"""Continuous morphisms, spaces and programs under the module paths of the user's snippets
(runtime spec 2.3).  Thin re-exports of `qvr.runtime`; importing a submodule imports torch."""
