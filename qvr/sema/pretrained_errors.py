"""Diagnostics of `role=pretrained` (docs/extensions.md E10): QVR860-QVR862, one
constructor per shape (messages as in `errors.py`)."""
from __future__ import annotations

from qvr.diagnostics import error
from qvr.text import Span


def model_not_found(span: Span, spelled: str, tried: str):
    return error("QVR860", span, f"pretrained model `{spelled}` not found: tried {tried} "
                                 f"(nothing is downloaded)")


def not_a_causal_lm(span: Span, spelled: str, folder: str, detail: str):
    return error("QVR861", span, f"`{spelled}` ({folder}) is not a causal language model "
                                 f"folder: {detail}")


def vocab_mismatch(span: Span, obj: str, n: int, spelled: str, vocab: int, named: bool = True):
    fix = f"declare `object {obj} : FinSet {vocab}`" if named else f"write `FinSet {vocab}`"
    return error("QVR862", span, f"the token object `{obj}` has {n} elements but the tokenizer "
                                 f"of `{spelled}` has {vocab} tokens; {fix}")


def missing_model(span: Span, name: str):
    return error("QVR206", span, f"pretrained morphism `{name}` is missing the required option "
                                 f"`model` (`model=\"FOLDER_OR_NAME\"`)")
