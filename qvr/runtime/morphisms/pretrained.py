"""`PretrainedLM`: a ``role=pretrained`` morphism (docs/extensions.md E10), a pretrained
causal language model (Hugging Face ``transformers``) as a kernel ``Token -> Token``.

Meaning: on tokens ``x`` of shape ``(…, L)`` (``L`` positions; one batch axis is a batch
of sequences of length 1), ``rsample`` gives ``(…, L)`` next tokens, the one at
position i drawn from p(· | x_0 … x_i): the model run once over each sequence, causally,
and its next-token distribution at every position, restricted to the token object's V
elements (the tokenizer's vocabulary; output rows past it, padding of the embedding
matrix, are never drawn).  No start token is added: the input is what the model reads.
``log_prob(x, y)`` is that distribution's log-probability of ``y``, per position.

The model is loaded on first use (``AutoModelForCausalLM.from_pretrained`` of the
folder the checker resolved, ``local_files_only``, in the declared dtype), not when the
module is compiled, and moved to the device of the tokens it is given; its weights are not parameters of the program (nothing fits them:
`fit` refuses every method but SMC, which steers the model through
`qvr.smc.hf_lm.HFCausalLM` with its KV cache).  Without ``transformers`` the first use
raises `PretrainedUnavailable` with the one line to fix it.
"""
from __future__ import annotations

import torch

from qvr.runtime.errors import QvrRuntimeError
from qvr.runtime.morphisms.base import ContinuousMorphism

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class PretrainedUnavailable(QvrRuntimeError, ImportError):
    """``transformers`` is not installed."""


def load_causal_lm(folder: str, dtype: str = "float32"):
    """``AutoModelForCausalLM`` of a model folder or a name in the Hugging Face cache,
    ``local_files_only`` (nothing is downloaded), in `dtype`, with transformers' "Loading
    weights" progress bars kept off the terminal; `PretrainedLM` and
    `qvr.smc.hf_lm.load_lm` load through it.  Raises what ``from_pretrained`` raises."""
    import transformers
    log = transformers.utils.logging
    bars = log.is_progress_bar_enabled()
    log.disable_progress_bar()
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, dtype=DTYPES[dtype])
    finally:
        if bars:
            log.enable_progress_bar()


class PretrainedLM(ContinuousMorphism):
    mixes_positions = True  # position i reads positions 0..i (E1)

    def __init__(self, domain, codomain, folder: str, dtype: str = "float32",
                 spelled: str = "", label=None):
        super().__init__(domain, codomain, label)
        self.folder = folder
        self.dtype_name = dtype
        self.spelled = spelled or folder
        self.vocab = int(codomain.size)

    # the loaded model is kept out of the module tree: not a parameter, never cast
    @property
    def hf_model(self):
        model = self.__dict__.get("_hf")
        if model is None:
            try:
                import transformers  # noqa: F401
            except ImportError:
                raise PretrainedUnavailable(
                    f"`{self.label}` is a pretrained language model: it needs Hugging Face "
                    f"transformers: pip install -e \".[lm]\" (transformers, tokenizers)") from None
            model = load_causal_lm(self.folder, self.dtype_name).eval()
            self.__dict__["_hf"] = model
        return model

    def _tokens(self, x) -> torch.Tensor:
        x = torch.as_tensor(x).long()
        return x.unsqueeze(-1) if x.dim() == 1 else x

    def logits(self, x) -> torch.Tensor:
        """float32 ``(…, L, V)`` next-token logits at every position of ``x`` ``(…, L)``."""
        tokens = self._tokens(x)
        lead, length = tokens.shape[:-1], tokens.shape[-1]
        model = self.hf_model
        if next(model.parameters()).device != tokens.device:  # the model follows its input
            model.to(tokens.device)
        flat = tokens.reshape(-1, length)
        with torch.no_grad():
            out = model(input_ids=flat, attention_mask=torch.ones_like(flat), use_cache=False)
        logits = out.logits[..., :self.vocab].float()
        return logits.reshape(*lead, length, self.vocab).to(tokens.device)

    def rsample(self, x, sample_shape=torch.Size()):
        one_axis = torch.as_tensor(x).dim() == 1
        probs = torch.softmax(self.logits(x).to(torch.float64), -1)
        n = int(torch.Size(sample_shape).numel())
        flat = probs.reshape(-1, self.vocab)
        draws = torch.multinomial(flat, max(n, 1), replacement=True)  # (rows, n)
        draws = draws.T.reshape(*sample_shape, *probs.shape[:-1])
        return draws.squeeze(-1) if one_axis else draws

    def log_prob(self, x, y):
        one_axis = torch.as_tensor(x).dim() == 1
        lp = torch.log_softmax(self.logits(x).to(torch.float64), -1)
        y = self._tokens(y)
        shape = torch.broadcast_shapes(y.shape, lp.shape[:-1])
        out = lp.expand(*shape, self.vocab).gather(-1, y.expand(shape).unsqueeze(-1)).squeeze(-1)
        out = out.to(torch.get_default_dtype())
        return out.squeeze(-1) if one_axis else out

    def extra_repr(self) -> str:
        return f"{self.label}: {self.domain.name} -> {self.codomain.name}, model={self.spelled}"
