"""The module checker: one pass over the top-level statements (qvr-language.md 11.1).

`check_chunks` checks a list of parsed statement chunks top to bottom.  Each declaration's
result is cached by its text; a cached result is reused when replaying the environment
reads it recorded gives the same answers, so an edit re-checks only the declarations
whose text or dependencies changed.  Module-wide diagnostics (QVR710 duplicate exports,
QVR714 companions) are computed afterwards from the per-declaration results.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from qvr.diagnostics import Diagnostic
from qvr.sema import errors as E
from qvr.sema.check_decls import (check_composition, check_duplicate, check_export,
                                  check_family_shadow, check_let, check_morphism, check_object)
from qvr.sema.check_deduction import check_deduction_body
from qvr.sema.check_program import check_program
from qvr.sema.context import DeclContext, DeclResult, Env
from qvr.sema.resolve import resolve_type
from qvr.sema.symbols import DeductionSym, UnknownSym
from qvr.sema.types import MorType
from qvr.syntax import ast as A
from qvr.syntax.parser import ParsedChunk
from qvr.text import Span

BODY_KEYWORDS = ("morphism", "program", "let", "deduction")


def check_deduction(ctx: DeclContext, d: A.DeductionDecl) -> None:
    dup = check_duplicate(ctx, "value", d.name)
    check_family_shadow(ctx, d.name)
    dom = resolve_type(ctx, d.dom)
    cod = resolve_type(ctx, d.cod)
    info = check_deduction_body(ctx, d)
    ctx.fact(d.name.span, "def", ("value", d.name.text))
    if not dup:
        ctx.bind("value", d.name.text, DeductionSym(
            d.name.text, MorType(dom, cod), info["semiring"], info["start"], tuple(info["atoms"]),
            tuple(info["binders"]), info["n_rules"], info["n_lexicon"]), d.name.span)


_CHECKERS = {
    A.ObjectDecl: check_object,
    A.CompositionDecl: check_composition,
    A.MorphismDecl: check_morphism,
    A.LetDecl: check_let,
    A.ExportDecl: check_export,
    A.ProgramDecl: check_program,
    A.DeductionDecl: check_deduction,
}


def check_one(env: Env, index: int, text: str, parsed: ParsedChunk) -> DeclResult:
    ctx = DeclContext(env, index, text)
    decl = parsed.decl
    if decl is None:
        # a statement with a syntax error: register its readable name as unknown (11.2)
        if parsed.name is not None:
            ns = "type" if parsed.keyword == "object" else "value"
            existing = ctx.object(parsed.name.text) if ns == "type" else ctx.value(parsed.name.text)
            if existing is None:
                ctx.bind(ns, parsed.name.text, UnknownSym(parsed.name.text, ns), parsed.name.span)
        return ctx.result()
    _CHECKERS[type(decl)](ctx, decl)
    return ctx.result()


def prescan_entries(parsed: ParsedChunk) -> tuple:
    """(namespace, name, relative offset) of every name the statement declares."""
    name = parsed.name
    if name is None:
        return ()
    ns = "type" if parsed.keyword == "object" else "value"
    out = [(ns, name.text, name.span.start)]
    d = parsed.decl
    if isinstance(d, A.MorphismDecl) and d.options is not None:
        for e in d.options.entries:
            if e.key.text == "replicate" and isinstance(e.value, A.Number) and e.value.is_int:
                out += [("value", f"{name.text}_{i}", name.span.start) for i in range(int(e.value.value))]
    return tuple(out)


@dataclass
class ModuleResult:
    results: list[DeclResult]
    module_diagnostics: list[Diagnostic]  # absolute spans
    env: Env
    rechecked: int  # how many declarations were checked afresh (for tests and benchmarks)


class CheckCache:
    """DeclResults by (chunk text, kind); a few candidates per text."""

    def __init__(self, limit: int = 50000):
        self.entries: dict[tuple, list[DeclResult]] = {}
        self.limit = limit

    def find(self, key, env: Env, index: int) -> Optional[DeclResult]:
        for r in self.entries.get(key, ()):
            if all(env.answer(k, index) == v for k, v in r.deps):
                return r
        return None

    def store(self, key, result: DeclResult) -> None:
        if len(self.entries) > self.limit:
            self.entries.clear()
        lst = self.entries.setdefault(key, [])
        lst.insert(0, result)
        del lst[3:]


def check_chunks(chunks: list, starts: list[int], start_lines: list[int], texts_lines,
                 cache: Optional[CheckCache] = None) -> ModuleResult:
    """Check parsed chunks in order.

    `chunks` is a list of (Chunk, ParsedChunk); `starts` their absolute offsets;
    `start_lines` the 1-based line of each chunk start; `texts_lines(i, rel)` gives the
    1-based line of a relative offset in chunk i.
    """
    cache = cache if cache is not None else CheckCache()
    prescan: dict = {}
    lines: list[int] = []
    name_spans: dict = {}
    for i, (chunk, parsed) in enumerate(chunks):
        entries = prescan_entries(parsed)
        line = texts_lines(i, entries[0][2]) if entries else start_lines[i]
        lines.append(line)
        for ns, name, rel in entries:
            prescan.setdefault((ns, name), []).append((i, line, parsed.keyword))
            if (ns, name) not in name_spans:
                name_spans[(ns, name)] = Span(starts[i] + rel, starts[i] + rel + len(parsed.name.text))
    env = Env(prescan, lines, name_spans)
    env.chunk_lines = start_lines
    results = []
    rechecked = 0
    for i, (chunk, parsed) in enumerate(chunks):
        key = (chunk.clean, chunk.kind, chunk.stmt_at)
        res = cache.find(key, env, i)
        if res is None:
            res = check_one(env, i, chunk.clean, parsed)
            cache.store(key, res)
            rechecked += 1
        results.append(res)
        for ns, name, sym, _span in res.bindings:
            table = env.values if ns == "value" else env.types
            if name not in table:
                table[name] = (sym, i)
        if res.composition is not None and env.composition_index is None:
            env.rule = res.composition
        if parsed.keyword == "composition" and env.composition_index is None:
            env.composition_index = i
        if parsed.keyword in BODY_KEYWORDS and env.first_body_index is None:
            env.first_body_index = i
    return ModuleResult(results, _module_diagnostics(results, starts, env), env, rechecked)


def _module_diagnostics(results: list[DeclResult], starts: list[int], env: Env) -> list[Diagnostic]:
    out = []
    exported: set[str] = set()
    uses: set = set()
    for i, r in enumerate(results):
        uses |= r.uses
        for name, span in r.exports:
            if name is None:
                continue
            if name in exported:
                out.append(E.duplicate_export(span.shift(starts[i]), name))
            exported.add(name)
    done = set()
    for r in results:
        for ns, s, used, how in r.suggestions:
            if (ns, s) in uses or (ns, s) in done:
                continue
            span = env.name_spans.get((ns, s))
            if span is None:
                continue
            done.add((ns, s))
            out.append(E.companion(span, s, used, how))
    return out
