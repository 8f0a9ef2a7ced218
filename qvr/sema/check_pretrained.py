"""Checking of `role=pretrained` morphisms (docs/extensions.md E10): a pretrained causal
language model as a ``Token -> Token`` kernel.

Called by `check_decls.check_morphism` for that role, after the options were read and
the keys of other roles reported (QVR201).  It checks the `model` option (a string;
required: QVR206), `dtype` (``"float32"``, ``"bfloat16"``: QVR203/QVR204), that there is
no initializer (QVR311), the signature (the same single `FinSet` object on both sides:
QVR306, a size read from the data: QVR115) and the model itself, read from its folder
through `qvr.sema.pretrained` (never torch): not found (QVR860), not a causal LM folder
(QVR861), a token object whose size is not the tokenizer's vocabulary (QVR862).  The
model read is an environment read of the declaration (key ``("pretrained", spelled)``),
so a cached check is reused only while the folder reads the same.
"""
from __future__ import annotations

from typing import Optional

from qvr.sema import errors as E
from qvr.sema import pretrained_errors as PE
from qvr.sema.pretrained import DTYPES, ModelInfo
from qvr.sema.suggest import suggest
from qvr.sema.types import FinSet, describe, is_sized, is_unknown, size_names, spell, strip
from qvr.syntax import ast as A

#: option keys of a pretrained morphism (`scale` is accepted by every role, QVR707 here)
PRETRAINED_KEYS = {"role", "scale", "model", "dtype"}


def _text(entry: A.OptionEntry) -> Optional[str]:
    v = entry.value
    if isinstance(v, A.StringLit):
        return v.value
    if isinstance(v, A.OVName):
        return v.text
    return None


def check_pretrained(ctx, d: A.MorphismDecl, opts: dict, dom, cod) -> Optional[tuple]:
    """The checks of the module docstring; the symbol's `pretrained` field:
    ``(spelled, folder, model_type, n_layers, vocab, dtype, cached_name)`` when the model
    was read, else None."""
    name = d.name.text
    if d.init is not None:
        ctx.report(E.initializer_not_allowed(d.init.span, "a `pretrained` morphism takes no `~` "
                                                          "initializer: its weights are the "
                                                          "model's"))
    dtype = "float32"
    if "dtype" in opts:
        entry = opts["dtype"]
        got = _text(entry)
        if got is None:
            ctx.report(E.option_shape(entry.key.span, "dtype", "a string: \"float32\" or "
                                                               "\"bfloat16\""))
        elif got not in DTYPES:
            ctx.report(E.unknown_value(entry.value.span, "dtype", got, DTYPES,
                                       suggest(got, DTYPES)))
        else:
            dtype = got
    if "scale" in opts:
        ctx.report(E.no_effect(opts["scale"].key.span, "`scale` has no effect on a pretrained "
                                                       "morphism"))
    # ---- the signature: one token object, mapped to itself
    token_n = None
    sides_ok = True
    for t, where, node in ((dom, "domain", d.dom), (cod, "codomain", d.cod)):
        if is_unknown(t):
            sides_ok = False
        elif not isinstance(strip(t), FinSet):
            ctx.report(E.role_signature(node.span, f"a pretrained morphism needs the token "
                                                   f"object (a single `FinSet`) as its {where}, "
                                                   f"got {describe(t)}"))
            sides_ok = False
    if sides_ok:
        if spell(dom) != spell(cod) or strip(dom) != strip(cod):
            ctx.report(E.role_signature(d.cod.span, f"a pretrained morphism maps the token "
                                                    f"object to itself: the codomain "
                                                    f"{describe(cod)} is not the domain "
                                                    f"{describe(dom)}"))
        elif is_sized(dom):
            ctx.report(E.size_name_literal(d.dom.span, "a pretrained morphism's token object",
                                           size_names(dom)[0], spell(dom)))
        else:
            token_n = strip(dom).n
    # ---- the model
    if "model" not in opts:
        ctx.report(PE.missing_model(d.name.span, name))
        return None
    entry = opts["model"]
    if not isinstance(entry.value, A.StringLit) or not entry.value.value:
        ctx.report(E.option_shape(entry.key.span, "model", "a string: a model folder or a "
                                                           "name in the Hugging Face cache"))
        return None
    spelled = entry.value.value
    info: ModelInfo = ctx.pretrained(spelled)
    at = entry.value.span
    if info.error == "missing":
        ctx.report(PE.model_not_found(at, spelled, info.detail))
        return None
    if info.error is not None:
        ctx.report(PE.not_a_causal_lm(at, spelled, info.folder, info.detail))
        return None
    if token_n is not None and token_n != info.vocab:
        ctx.report(PE.vocab_mismatch(d.dom.span, spell(dom), token_n, spelled, info.vocab,
                                     isinstance(d.dom, A.TName)))
    return (spelled, info.folder, info.model_type, info.n_layers, info.vocab, dtype,
            info.cached_name)
