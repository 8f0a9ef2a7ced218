"""The llamppl side of ``bench/smc.py --lm``: SMC steering of a Hugging Face causal LM by
llamppl 0.2.3 (Lew et al. 2023's own library), run in the side virtualenv
(``~/.cache/qvr/bench-llamppl``: torch, transformers, llamppl) as a subprocess.

Driven over stdin/stdout one run at a time (`main`), so that ``bench/smc.py`` can
interleave llamppl's runs with qvr's (both see the same load).  The job gives the model
folder, the particles' start ids (``head``: the start token and the prompt,
exactly the ids qvr feeds), the forbidden words, ``max_len``, ``N``, the seeds, torch's
thread count and the llamppl settings to run (``ess_threshold``, the backend's
``batch_size`` and ``timeout``).

The model (`Steer`) is the plain llamppl program of the constraint, matched to qvr's
potential (`qvr.smc.text_potentials.forbid_words`): each `step` samples one token from
the LM (`LMContext.next_token`), then ``condition``s on the detokenised continuation
holding no forbidden word, judged exactly as qvr judges it (whole words ``\\w+|[^\\w\\s]+``;
the last word is partial until text follows it or the string ends: end token, or
``max_len`` tokens), and finishes at the end token or ``max_len``.  So the target
(the LM conditioned on the constraint, truncated at ``max_len``) and the estimator
``log Ẑ = logsumexp(weights) - log N`` are qvr's.

Nothing of llamppl is changed: `CachedCausalLM.from_pretrained(folder, backend="hf")`
loads a local folder on CPU as it is.  The context's ids are set to ``head`` after
construction (llamppl's `LMContext` encodes a prompt string without a start token; qvr
puts the model's start token first); the prompt's keys and values are cached with
`CachedCausalLM.cache_kv`, as llamppl's examples do, and the cache (its token trie:
logprobs per prefix, the prompt's KV) is cleared before every run so no run reuses
another's work.  Every run's time includes that prompt forward, as qvr's includes its.
"""
from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import time

import numpy as np
import torch

try:
    from llamppl import CachedCausalLM, LMContext, Model, smc_standard
    from llamppl.util import log_softmax
except ImportError:  # qvr's tests import `violates` alone (tests/bench)
    Model = object

_WORD = re.compile(r"\w+|[^\w\s]+")


def violates(text: str, final: bool, phrases) -> bool:
    """qvr's `forbid_words` judgment of a continuation's text (`words_of` + `_ForbidWords`)."""
    words = _WORD.findall(text)
    if not (final or not words or not text or text[-1].isspace()):
        words = words[:-1]  # the last word is partial
    for p in phrases:
        n = len(p)
        if any(tuple(words[i:i + n]) == p for i in range(len(words) - n + 1)):
            return True
    return False


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class Steer(Model):
    def __init__(self, lm, head, phrases, max_len, counter):
        super().__init__()
        self.lm, self.eos = lm, lm.tokenizer.eos_token_id
        self.context = LMContext.__new__(LMContext)  # LMContext(lm, prompt) without
        self.context._init_common(lm, "", 1.0, False, True)  # its forward of no ids
        self.context.tokens = list(head)
        self.context.prompt_token_count = len(head)
        self.context.prompt_string_length = len(lm.tokenizer.decode(head))
        self.context.next_token_logprobs = log_softmax(
            lm.next_token_logprobs_unbatched(list(head)))
        self.start_len, self.phrases, self.max_len = len(head), phrases, max_len
        self.counter = counter

    def immutable_properties(self):
        return {"lm", "phrases", "counter", "start_len", "max_len", "eos"}

    async def step(self):
        self.counter["tokens"] += 1
        if self.counter["track"]:
            self.counter["peak"] = max(self.counter["peak"], rss_bytes())
        token = await self.sample(self.context.next_token())
        cont = self.context.tokens[self.start_len:]
        ends = token.token_id == self.eos
        final = ends or len(cont) >= self.max_len
        text = self.lm.tokenizer.decode(cont[:-1] if ends else cont,
                                        skip_special_tokens=False)
        self.condition(not violates(text, final, self.phrases))
        if final:
            self.finish()

    def continuation(self):
        return self.context.tokens[self.start_len:]


def run_once(lm, job, setting, seed, counter):
    lm.clear_cache()
    lm.model.batch_size, lm.model.timeout = setting["batch_size"], setting["timeout"]
    np.random.seed(seed)
    t0 = time.perf_counter()
    lm.cache_kv(list(job["head"]))
    model = Steer(lm, job["head"], [tuple(p) for p in job["phrases"]], job["max_len"],
                  counter)
    particles = asyncio.run(smc_standard(model, job["N"],
                                         ess_threshold=setting["ess_threshold"]))
    wall = time.perf_counter() - t0
    w = np.array([p.weight for p in particles], dtype=np.float64)
    top = w.max()
    log_z = -math.inf if top == -math.inf else \
        float(top + np.log(np.exp(w - top).sum()) - math.log(job["N"]))
    return wall, log_z, particles


def main() -> None:
    """Line protocol: the job (one JSON line), answered by ``{"versions", "threads"}``
    once the model is loaded and every setting warmed up; then one line per run,
    ``{"setting", "seed", "track"}``, answered by ``{"wall", "tokens", "log_Z"}`` (and,
    when ``track``, the peak RSS growth over the run's steps and the trie's bytes at its
    end); an empty line ends."""
    job = json.loads(sys.stdin.readline())
    torch.set_num_threads(job["threads"])
    lm = CachedCausalLM.from_pretrained(job["lm"], backend="hf")
    counter = {"tokens": 0, "track": False, "peak": 0}
    for setting in job["settings"].values():
        run_once(lm, job, setting, 10_000, counter)  # warm-up
    print(json.dumps({"versions": {"llamppl": _version(), "torch": torch.__version__,
                                   "transformers": _version("transformers")},
                      "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        ask = json.loads(line)
        counter.update(tokens=0, track=bool(ask.get("track")))
        lm.clear_cache()
        base = counter["peak"] = rss_bytes()
        wall, log_z, particles = run_once(lm, job, job["settings"][ask["setting"]],
                                          ask["seed"], counter)
        out = {"wall": wall, "tokens": counter["tokens"], "log_Z": log_z}
        if ask.get("track"):
            out.update(rss_delta=counter["peak"] - base,
                       trie_bytes=_trie_bytes(lm.model._caches),
                       sample=[lm.tokenizer.decode(p.continuation()) for p in particles[:3]])
        print(json.dumps(out), flush=True)


def _trie_bytes(caches) -> int:
    """Bytes of logprob vectors and keys/values held by llamppl's token tries."""
    total, stack = 0, list(caches.values())
    while stack:
        node = stack.pop()
        if node.logprobs is not None:
            total += node.logprobs.untyped_storage().nbytes()
        if node.past_key_values is not None:
            for layer in node.past_key_values.layers:
                for x in (layer.keys, layer.values):
                    total += x.untyped_storage().nbytes()
        stack.extend(node.children.values())
    return total


def _version(pkg: str = "llamppl") -> str:
    from importlib.metadata import version
    return version(pkg)


if __name__ == "__main__":
    main()
