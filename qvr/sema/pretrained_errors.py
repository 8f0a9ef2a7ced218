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


# ---- score steps of a steering program (E10 "Potentials in the program"): QVR863-QVR868

def text_function_outside(span: Span, name: str):
    return error("QVR863", span, f"`{name}` is a text function: it is read only in the score "
                                 f"steps of a steering program (`sample NAME <- LM` with LM "
                                 f"pretrained, then `score` steps, then `return NAME`)")


def steering_step(span: Span, message: str):
    """QVR864: a step (or header part) SMC cannot run in a steering program."""
    return error("QVR864", span, message)


def not_the_token(span: Span, name: str, token: str, got: str):
    return error("QVR865", span, f"the first argument of `{name}` is the sampled token "
                                 f"`{token}`, got `{got}`")


def text_argument(span: Span, message: str):
    """QVR866: a text function's argument of the wrong kind (a string, a positive integer)."""
    return error("QVR866", span, message)


def score_reads(span: Span, message: str):
    """QVR867: a steering score step reads what SMC does not supply, or a form it does not
    evaluate."""
    return error("QVR867", span, message)


def indicator_sign(span: Span, name: str, how: str):
    return error("QVR868", span, f"`{name}` is 0 or -inf (a constraint): {how} would make a "
                                 f"ruled-out text +inf or NaN; constraints combine by `+` and "
                                 f"by a positive number factor")
