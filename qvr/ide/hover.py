"""Hover: what the token under the cursor is, in QVR notation (qvr-language.md 14.1-14.2).

`hover(doc, offset)` returns a `Hover` with the hovered token's span and Markdown text: a
fenced `qvr` block holding the signature line (and, for objects defined by names or
products, the `= structure` line), then a line of facts, then the declaration's `##` doc
comment.  The text is built from the checker's facts and symbols only; this module does
no checking of its own and knows nothing of LSP.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from qvr.ide.catalog import COMBINATORS, option_doc
from qvr.ide.entities import Builtin, Local, Top, entity_at, pick
from qvr.sema.families import BUILTINS, FAMILIES, space_of
from qvr.sema import runnable  # E9.9
from qvr.sema.symbols import (DeductionSym, GroupSym, LetSym, MorphismSym, ObjectSym, ProgramSym,
                              UnknownSym)
from qvr.sema.types import bounds_text, size_names, spell, spell_mor, structure, structure_mor
from qvr.text import Span


@dataclass(frozen=True)
class Hover:
    span: Span  # the hovered token, document offsets
    text: str  # Markdown


def render(signature: str, facts: str = "", docs: tuple = ()) -> str:
    out = f"```qvr\n{signature}\n```"
    if facts:
        out += f"\n{facts}"
    if docs:
        out += "\n\n" + "\n".join(docs)
    return out


def hover(doc, offset: int) -> Optional[Hover]:
    hit = entity_at(doc, offset, with_expr=True)
    if hit is None:
        return _composition(doc, offset)
    span, ent = hit
    text = None
    if isinstance(ent, Top):
        text = _top(doc, ent, span)
    elif isinstance(ent, Local):
        text = _local(doc, ent, span)
    elif isinstance(ent, Builtin):
        text = _builtin(ent)
    return Hover(span, text) if text else None


# ---------------------------------------------------------------- top-level names

def _own_symbol(doc, ent: Top, span: Span):
    """The symbol the hovered occurrence means: its own binding at a declaration site,
    otherwise the first binding (later duplicates are not registered, 11.2)."""
    slot = doc.state.slots[doc.chunk_at(span.start)]
    sym = slot.bindings.get((ent.ns, ent.name))
    return sym if sym is not None else doc.symbol(ent.ns, ent.name)


def _plural(n: int, word: str, words: str = "") -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _num(x: float) -> str:
    return repr(float(x))


def pretrained_text(p: tuple) -> str:
    """E10: ``pretrained causal LM `tiny_lm` (gpt2, 2 layers), vocabulary 64 tokens · from
    FOLDER`` (· bfloat16 when not float32)."""
    spelled, folder, model_type, layers, vocab, dtype, cached = p
    bits = [b for b in (model_type, None if layers is None else _plural(layers, "layer")) if b]
    text = f"pretrained causal LM `{spelled}`" + (f" ({', '.join(bits)})" if bits else "")
    text += f", vocabulary {vocab} tokens"
    if dtype != "float32":
        text += f" · {dtype}"
    return text + (" · from the Hugging Face cache" if cached else f" · from {folder}")


def symbol_lines(sym) -> tuple[str, str]:
    """(signature line(s), facts line) of a top-level symbol."""
    if isinstance(sym, ObjectSym):
        t = sym.type
        sp = space_of(t)
        if sp is not None:  # E9.2: a constrained space
            return f"{sym.name} : {sp.spelling}", f"object · {sp.space.describe(sp.size)}"
        sig = f"{sym.name} : {spell(t)}{bounds_text(t)}"
        if structure(t) != spell(t) and structure(t) != "?":
            sig += f"\n= {structure(t)}"
        names = size_names(t)
        if names:  # `object Child : FinSet N`: the size is bound with the data
            return sig, "object · size " + ", ".join(f"`{n}`" for n in names) + " read from the data"
        return sig, "object"
    if isinstance(sym, MorphismSym):
        facts = "morphism"
        if sym.role:
            facts += f" · role {sym.role}"
            if sym.role in ("observed", "let") or (sym.role == "latent" and sym.init_text):
                if sym.init_text:
                    facts += f" ~ {sym.init_text}"
            elif sym.family:
                facts += f" ~ {sym.family}"
            elif sym.lookup_table:
                facts += " (lookup table)"
            elif sym.deterministic:
                facts += " (deterministic)"
        if sym.role == "attention" and sym.heads is not None:
            # design E2: `attention, 4 heads × 4, causal`, in the facts line's `·` style
            facts += f" · {_plural(sym.heads, 'head')}"
            if sym.head_dim is not None:
                facts += f" × {sym.head_dim}"
            if sym.causal:  # `causal=strict` (keys j < i) reads "strictly causal"
                facts += ", strictly causal" if sym.causal_strict else ", causal"
        if sym.positions is not None:
            facts += f" · {_plural(sym.positions, 'position')}"
        if sym.role == "pretrained" and sym.pretrained is not None:  # E10
            facts += " · " + pretrained_text(sym.pretrained)
        if sym.deterministic and sym.role == "let":
            facts += " · deterministic last link"
        if sym.scale is not None and sym.replica is None:  # 14.2 shows replicas without it
            facts += f" · scale {_num(sym.scale)}"
        if sym.stratum == "relational" and sym.rule:
            facts += f" · rule {sym.rule}"
        if sym.bins is not None and sym.role == "discretize":
            facts += f" · {sym.bins} bins"
        if sym.replica is not None:
            i, n, group = sym.replica
            facts += f" · replica {i + 1} of {n} of {group}"
        return f"{sym.name} : {spell_mor(sym.type)}", facts
    if isinstance(sym, GroupSym):
        m = sym.members
        shown = ", ".join(m) if len(m) <= 2 else f"{m[0]} … {m[-1]}"
        return f"{sym.name} : {spell_mor(sym.type)}", f"replica group of {len(m)}: {shown}"
    if isinstance(sym, LetSym):
        facts = "let"
        if sym.stratum == "relational" and sym.rule:
            facts += f" · rule {sym.rule}"
        if sym.deterministic:
            facts += " · deterministic last link"
        return f"{sym.name} : {spell_mor(sym.type)}", facts
    if isinstance(sym, ProgramSym):
        head = sym.name
        if sym.param_style == "data":
            head += "(" + ", ".join(p for p, _ in sym.params) + ")"
        elif sym.param_style == "typed":
            head += "(" + ", ".join(f"{p} : {k or '?'}" for p, k in sym.params) + ")"
        facts = "parametric program" if sym.parametric else "program"
        if sym.effects and sym.param_style == "none":  # as in 14.2: effects for plain programs
            facts += " · effects " + ", ".join(sym.effects)
        return f"{head} : {spell_mor(sym.type)}", facts
    if isinstance(sym, DeductionSym):
        facts = f"deduction · semiring {sym.semiring}"
        if sym.start:
            facts += f" · start {sym.start}"
        facts += (f" · {_plural(len(sym.atoms), 'atom')} · {_plural(sym.n_rules, 'rule')}"
                  f" · {_plural(sym.n_lexicon, 'lexicon entry', 'lexicon entries')}")
        return f"{sym.name} : {spell_mor(sym.type)}", facts
    if isinstance(sym, UnknownSym):
        return f"{sym.name} : ?", ("object" if sym.namespace == "type" else "value") + " (its declaration has errors)"
    return "", ""


def _top(doc, ent: Top, span: Span) -> Optional[str]:
    sym = _own_symbol(doc, ent, span)
    if sym is None:
        return None
    sig, facts = symbol_lines(sym)
    if not sig:
        return None
    return render(sig, facts, doc.docs_for(ent.ns, ent.name))


def _composition(doc, offset: int) -> Optional[Hover]:
    """The rule name of a `composition` declaration."""
    from qvr.sema.families import COMPOSITION_RULES
    hit = pick(doc, offset, ("keyword",))
    if hit is None or hit[2].data != "composition":
        return None
    slot, base, f = hit
    word = doc.text[base + f.span.start:base + f.span.end]
    rule = next((r for r in COMPOSITION_RULES if r.lower() == word.lower()), None)
    if rule is None:
        return None
    facts = f"composition rule · level {COMPOSITION_RULES[rule]}"
    if slot.result is None or slot.result.composition is None:
        facts += " · not in effect (a module has one composition declaration)"
    return Hover(f.span.shift(base), render(f"composition {rule}", facts))


# ---------------------------------------------------------------- locals

_DEDUCTION_LOCALS = {"atom": "atom", "binder": "binder", "patvar": "pattern variable",
                     "rule": "rule", "bound": "bound variable"}


def local_lines(doc, ent: Local) -> tuple[str, str]:
    info = ent.info
    if info.kind in _DEDUCTION_LOCALS:
        facts = f"deduction {info.owner}"
        if info.kind == "patvar" and info.detail:
            facts += f" · rule {info.detail}"
        elif info.kind == "bound" and info.detail:
            facts += f" · binder {info.detail}"
        return f"{_DEDUCTION_LOCALS[info.kind]} {info.name}", facts
    st = doc.state
    line = doc.position(st.starts[ent.slot.index] + ent.span.start).line + 1
    detail = info.detail or info.kind
    if info.kind == "record":  # E9.6: `record theta : School` / `recorded per draw · line 7`
        return f"record {info.name} : {info.type_text}", f"{detail} · line {line}"
    return f"{info.name} : {info.type_text}", f"{detail} · line {line}"


def _local(doc, ent: Local, span: Optional[Span] = None) -> str:
    info = ent.info
    if info.kind == "observe" and span is not None \
            and span.start < doc.state.starts[ent.slot.index] + ent.span.start:
        # E9.1: an observed series read before its `observe` step is the observed value
        line = doc.position(doc.state.starts[ent.slot.index] + ent.span.start).line + 1
        return render(f"{info.name} : {info.type_text}", f"observed data of `{info.name}` (line {line})")
    return render(*local_lines(doc, ent))


# ---------------------------------------------------------------- builtins, families, …

def family_lines(name: str) -> tuple[str, str, str]:
    fam = FAMILIES[name]
    facts = f"family · support {fam.support} · {'discrete' if fam.discrete else 'continuous'}"
    # E9.9: where this runtime does not build it (the checker reports QVR950 there)
    missing = [pos for pos, col, runs in (("a step target", fam.step, runnable.step_supported),
                                          ("a kernel", fam.kernel, runnable.kernel_supported))
               if col != "no" and not runs(name)]
    if missing:
        facts += " · not supported by this runtime as " + " or as ".join(missing)
    if name in runnable.SPACE_FAMILIES:
        facts += f" · a sample step with `over=` a `{runnable.SPACE_FAMILIES[name][0]} K` object"
    if fam.step == "no":
        facts += " · kernel only"
    params = ", ".join(f"{p}: {k}" for p, k in fam.params) or "no parameters"
    return fam.signature, facts, f"{fam.support_text}; event rank {fam.event_rank}; {params}"


def _builtin(ent: Builtin) -> Optional[str]:
    k, data = ent.kind, ent.data
    if k == "family" and data in FAMILIES:
        sig, facts, doc = family_lines(data)
        return render(sig, facts, (doc,))
    if k == "builtin":
        b = BUILTINS.get(data)
        if b is not None:
            return render(b.signature, f"builtin · {b.kinds}", (b.doc,))
        from qvr.sema.steering_scores import TEXT_FUNCTIONS  # E10
        if data in TEXT_FUNCTIONS:
            f = TEXT_FUNCTIONS[data]
            return render(f.signature, f"text function of a steering program's score steps · "
                                       f"{f.kinds}", (f.meaning,))
        if data in COMBINATORS:
            params, _snip, meaning = COMBINATORS[data]
            return render(f"{data}({', '.join(params)})", "morphism constructor", (meaning,))
        return None
    if k == "host":
        return render(f"{data} : host data", "supplied at run time")
    if k == "size":  # `object Row : FinSet N` (sizes read from the data)
        return render(f"{data} : size", "read from the data when it is bound",
                      (f"the data's `{data}` entry, else the leading size of the values typed "
                       f"by the objects of size `{data}`",))
    if k == "option":
        position, key = data
        meaning = option_doc(position, key)
        return render(key, f"option of {'an' if position[0] in 'aeiou' else 'a'} {position}"
                      + (f" · {meaning}" if meaning else ""))
    if k == "argexpr":  # E9.10: a family argument that is an expression
        text, axes, param, family = data
        what = f"argument `{param}` of `{family}`" if param else f"argument of `{family}`"
        return render(f"{text} : {axes}", f"{what} · computed as a `let`")
    if k == "expr":
        mt, text = data
        facts = ""
        if structure_mor(mt) != spell_mor(mt):
            facts = f"structure: {structure_mor(mt)}"
        return render(f"{text} : {spell_mor(mt)}", facts)
    return None
