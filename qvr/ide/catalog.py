"""Static editor knowledge of the language: option keys and values, keywords, snippets and
combinator signatures (qvr-language.md 5.2, 7.6-7.8, 10.1, 10.5, 11.4, 13).

Shared by hover, completion and signature help.  Families and builtins are not repeated
here: they live in `qvr.sema.families`, the single source of truth.  Nothing here looks
at a document.
"""
from __future__ import annotations

import re
from typing import Optional

from qvr.sema.families import (ATTENTION_FAMILIES, COMPOSITION_LEVELS, COMPOSITION_RULES,  # noqa: F401
                               ROLES, SEMIRINGS)
from qvr.sema.families import SPACES as _SPACE_KINDS

# (position, key) -> meaning; positions are those of `qvr.sema.options.read_options`.
OPTION_DOCS: dict[str, dict[str, str]] = {
    "object": {
        "low": "lower bound of every coordinate of a bounded `Real n` object",
        "high": "upper bound of every coordinate of a bounded `Real n` object",
    },
    "morphism": {
        "role": "what kind of morphism this is: latent, observed, kernel, embed, discretize, let, "
                "attention or pretrained (required)",
        "replicate": "declare that many independent copies NAME_0 … NAME_{k-1} plus a replica group NAME",
        "scale": "latent: standard deviation of the initial raw parameters; location–scale kernels: "
                 "the output scale at initialisation",
        "init": "`auto`: algebra-specific initialisation of a latent morphism's parameters",
        "hidden_dim": "width of the network that computes a family kernel's parameters (default 64)",
        "n_layers": "number of layers of a `Flow` kernel (default 4)",
        "rank": "rank of the covariance factor of a `LowRankMVN` kernel",
        "temperature": "fixed relaxation temperature of a RelaxedBernoulli or RelaxedOneHotCategorical kernel",
        "bins": "number of bins of a discretize morphism; the codomain must have that many elements",
        "over": "the event axes of the family: the axes that index one joint draw",
        "iid": "the batch axes: axes over which the family's draws are independent",
        "heads": "attention: number of heads (default 1)",
        "head_dim": "attention: width of one head's queries, keys and values (default: the domain's "
                    "width divided by `heads`)",
        "causal": "attention: position i attends only to positions j <= i (a bare flag); "
                  "`causal=strict`: only to j < i (position 0 attends to nothing: 0)",
        "positions": "embed: a learned vector per position index, added to the embedding; the "
                     "longest sequence it accepts",
        # E10: a pretrained causal language model
        "model": "pretrained: the model, a folder (relative to this file's folder first) or a "
                 "name in the Hugging Face cache (`\"gpt2\"`); required, never downloaded",
        "dtype": "pretrained: the model's dtype, \"float32\" (default) or \"bfloat16\"",
    },
    "sample step": {
        "over": "the event axes of the family: objects whose elements index one joint draw",
        "iid_over": "the batch axes: objects over which draws are independent",
        # extension E9: truncation of a continuous family
        "lower": "truncation: the lower bound of the draw (a number, a local or host data); the family's "
                 "density is renormalised on [lower, upper]",
        "upper": "truncation: the upper bound of the draw (a number, a local or host data); the family's "
                 "density is renormalised on [lower, upper]",
    },
    "observe step": {
        "via": "inside a grouped marginalize block: the per-row index mapping each row to an element "
               "of the grouping object",
        # extension E9: truncation of a continuous family
        "lower": "truncation: the lower bound of the observed value (a number, a local or host data); "
                 "the family's density is renormalised on [lower, upper]",
        "upper": "truncation: the upper bound of the observed value (a number, a local or host data); "
                 "the family's density is renormalised on [lower, upper]",
    },
    "marginalize step": {
        "over": "makes the block grouped: each element of this object has one latent class, shared by its rows",
        "reduction": "how per-class scores are combined: logsumexp (default), sum or mean",
    },
    "deduction": {
        "semiring": "how weights combine: LogProb (default), Viterbi, Boolean or Counting",
        "start": "the atom that selects the goal items",
        "depth": "bound on the nesting depth of constructor terms in rule conclusions",
        "tolerance": "convergence threshold for weights on cyclic rule graphs",
    },
    "pragma": {
        "learnable": "the rule's (or lexicon entry's) weight is a learnable parameter",
        "bounded": "keep a learnable rule weight non-positive in log space, so weight cycles converge",
    },
}

# option keys allowed per morphism role (5.2)
ROLE_KEYS = {
    "latent": ("role", "replicate", "scale", "init", "over", "iid"),
    "observed": ("role", "replicate", "scale"),
    "kernel": ("role", "replicate", "scale", "hidden_dim", "n_layers", "rank", "temperature", "over", "iid"),
    "embed": ("role", "replicate", "scale", "positions"),
    "discretize": ("role", "replicate", "scale", "bins"),
    "let": ("role", "replicate", "scale"),
    "attention": ("role", "replicate", "scale", "heads", "head_dim", "causal"),
    "pretrained": ("role", "model", "dtype"),  # E10 (`scale` accepted without effect)
}

# option keys written alone, without `=value` (bare flags)
FLAG_KEYS = frozenset({"causal"})

# known option values by key (None: names of a namespace, filled in by completion)
OPTION_VALUES = {
    "role": ROLES,
    "init": ("auto",),
    "causal": ("strict",),  # `causal` alone is j <= i; `causal=strict` j < i (E2)
    "dtype": ('"float32"', '"bfloat16"'),  # E10
    "reduction": ("logsumexp", "sum", "mean"),
    "semiring": SEMIRINGS,
}

STATEMENT_SNIPPETS = {
    "object": "object ${1:Name} : ${2:FinSet ${3:2}}",
    "morphism": "morphism ${1:name} : ${2:A} -> ${3:B} [role=${4:kernel}] ~ ${5:Normal}",
    "let": "let ${1:name} = ${0}",
    "program": "program ${1:name} : ${2:A} -> ${3:B}\n    ${4:sample x <- Normal(0.0, 1.0)}\n    return ${5:x}",
    "deduction": "deduction ${1:Name} : ${2:A} -> ${3:B} [semiring=${4:LogProb}]\n    atoms ${5:S}\n    ${0}",
    "export": "export ${1:name}",
    "composition": "composition ${1:product_fuzzy} as ${2:algebra}",
}

STEP_SNIPPETS = {
    "sample": "sample ${1:x} <- ${2:Normal(0.0, 1.0)}",
    "observe": "observe ${1:y} : ${2:N} <- ${3:Normal(mu, sigma)}",
    "marginalize": "marginalize ${1:z} <- ${2:Categorical(probs)}\n    ${0}",
    "let": "let ${1:v} = ${0}",
    "score": "score ${1:s} = ${0}",
    "return": "return ${1:x}",
    # extension E9 (docs/extensions.md): declared host data and recorded quantities
    "data": "data ${1:X} : ${2:Row}",
    "record": "record ${1:v} = ${0}",
}

# E9.10: boolean operators of let-expressions (comparisons `==` `!=` `<` `<=` `>` `>=`
# are operators); completion offers them with the let-expression candidates
LOGIC_KEYWORDS = {
    "and": "1 where both sides are not 0, else 0",
    "or": "1 where either side is not 0, else 0",
    "not": "1 where the value is 0, else 0",
}

ENTRY_SNIPPETS = {
    "atoms": "atoms ${1:S}",
    "binders": "binders ${1:Fn}",
    "rule": "rule ${1:name} : ${2:A} |- ${3:B}",
    "lexicon": "lexicon\n    \"${1:word}\" : ${2:Cat} = ${3:lf}",
}

# morphism combinators (6.1): name -> (parameters, snippet, meaning)
COMBINATORS = {
    "fan": (("e1", "…", "en"), "fan(${1:f})", "run the arguments side by side on one input; "
            "codomain is the product of theirs"),
    "stack": (("f", "n"), "stack(${1:f}, ${2:2})", "chain n independent copies of an endomorphism f"),
    "repeat": (("f", "n"), "repeat(${1:f}, ${2:2})", "chain f with itself n times (shared parameters); "
               "without n, a relational f repeated to run time"),
    "scan": (("f",), "scan(${1:f})", "thread a hidden state: a cell `D1 * … * H -> H` becomes `D1 * … -> H`"),
    "identity": (("A",), "identity(${1:A})", "the identity relation on a finite object A"),
    "from_data": (("\"KEY\"",), "from_data(\"${1:key}\")", "a fixed relation supplied when the module is loaded "
                  "(only as the whole initializer of an observed morphism)"),
    # extension (docs/extensions.md E4)
    "residual": (("f",), "residual(${1:f})", "x -> x + y with y ~ f(x), for f : A -> A over Real spaces; "
                 "deterministic when f is"),
    "layer_norm": (("A",), "layer_norm(${1:A})", "deterministic A -> A over a Real space: "
                   "(x - mean) / sqrt(var + 1e-5) * gain + bias, gain and bias learned"),
    "rms_norm": (("A",), "rms_norm(${1:A})", "deterministic A -> A over a Real space: "
                 "x / sqrt(mean(x^2) + 1e-5) * gain + bias, gain and bias learned"),
}

COMPOSITION_RULE_NAMES = tuple(COMPOSITION_RULES)
LEVELS = COMPOSITION_LEVELS


def option_doc(position: str, key: str) -> str:
    return OPTION_DOCS.get(position, {}).get(key, "")


# ---------------------------------------------------------------- extension E9

def _spaces() -> dict:
    """The constrained vector spaces an `object` declaration may name (docs/extensions.md
    E9), from the checker's table: name -> (snippet, meaning)."""
    return {name: (f"{name} ${{1:{3 if k.matrix else 2}}}", k.describe("n"))
            for name, k in _SPACE_KINDS.items()}


SPACES = _spaces()


def split_params(inner: str) -> list[str]:
    """`x, (s, t) -> body, O?` -> ["x", "(s, t) -> body", "O?"]: commas at bracket depth 0."""
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def builtin_params(b) -> list[tuple[str, bool]]:
    """The parameters of a let-expression builtin as its table spells them in
    `Builtin.signature`, each with whether it is optional (the table marks an optional
    trailing parameter with `?`: `sum(x, axis?)`)."""
    sig = b.signature
    inner = sig[sig.index("(") + 1:sig.rindex(")")] if "(" in sig else ""
    return [(p, p.endswith("?")) for p in split_params(inner)]


def param_name(p: str) -> str:
    """A parameter as written in a signature, without the optional mark: `axis?` -> `axis`."""
    return p.strip().rstrip("?").strip()


def arg_kinds(b) -> list[str]:
    """The argument kinds of a builtin as its table spells them (`numeric, object? -> numeric`
    -> ["numeric", "object?"]; a lambda kind keeps its parameters: `lambda (s, t)`).  The
    result is after the last `->`, so a lambda kind may spell its own result."""
    left = b.kinds.rsplit("->", 1)[0] if "->" in b.kinds else ""
    return [k.strip() for k in split_params(left)]


def _kind(b, i: int) -> str:
    kinds = arg_kinds(b)
    return kinds[i].rstrip("?").strip() if i < len(kinds) else ""


def lambda_params(b, i: int) -> Optional[list[str]]:
    """The parameter names of the lambda that parameter `i` of builtin `b` takes
    (`fold`: ["s", "t"], `ode`: ["y", "t"]), or None when it takes no lambda."""
    kind = _kind(b, i)
    if not kind.startswith("lambda"):
        return None
    m = re.search(r"\(([^()]*)\)", kind)
    return [p.strip() for p in m.group(1).split(",")] if m else ["s", "t"]


def is_object_param(b, i: int) -> bool:
    """Parameter `i` of builtin `b` names an object (the axis of `sum(x, O)`, the index set
    of `fold(O, …)`, `eye(O)`): its kind in the table is `object`."""
    return _kind(b, i) == "object"


def is_only_object_param(b, i: int) -> bool:
    """An object parameter that takes nothing else: not the second argument of `max(a, b)` /
    `min(a, b)`, which the table documents as elementwise when given a value."""
    return is_object_param(b, i) and "elementwise" not in b.doc


def is_family_param(b, i: int) -> bool:
    """Parameter `i` is a family call (`log_density(Normal(mu, s), x)`)."""
    return _kind(b, i).startswith("family")
