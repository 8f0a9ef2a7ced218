"""Text functions of a steering program's score steps (docs/extensions.md E10,
"Potentials in the program") in the let-expression compiler (`qvr.runtime.letexpr.CALLS`).

A text call compiles to a read of its value from the frame: SMC's score frame
(`qvr.inference.methods.smc_scores`) supplies ``text_value(key)``, a tensor over the
step's children.  The program's own log-density has no tokenizer to read text with, so
a frame without ``text_value`` (the program run from Python, not steered) raises a clear
error instead."""
from __future__ import annotations

from qvr.sema.steering_scores import TEXT_FUNCTIONS, call_key


class TextFunctionOutsideSteering(RuntimeError):
    pass


def _compile_text_call(compiler, e, binders):
    key, name = call_key(e), e.callee.text

    def run(frame, b):
        read = getattr(frame, "text_value", None)
        if read is None:
            raise TextFunctionOutsideSteering(
                f"`{name}` reads the text of the steered tokens: a steering program's score "
                f"steps are evaluated by SMC (qvr run FILE --method smc), not by its "
                f"log-density")
        return read(key)
    return run


TEXT_CALLS = {name: _compile_text_call for name in TEXT_FUNCTIONS}
