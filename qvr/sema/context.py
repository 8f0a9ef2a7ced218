"""The per-declaration checking context and its result record.

A declaration is checked against the module environment built from the declarations above
it.  Every environment read goes through `DeclContext`, which records the read and its
answer.  A cached `DeclResult` stays valid as long as replaying its recorded reads against
the new environment gives the same answers (salsa-style early cutoff, in one small module).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from qvr.diagnostics import Diagnostic
from qvr.text import Span


class Fact(NamedTuple):
    """A position fact for editor queries; `span` is relative to the chunk.

    kinds: ``def`` (a top-level name being declared: data=(namespace, name)), ``ref`` (a use
    of a top-level name: data=(namespace, name)), ``local`` (a program/deduction local
    being bound: data=LocalInfo), ``localref`` (a use: data=def span), ``expr`` (a
    morphism sub-expression: data=(MorType, text)), ``family``, ``builtin``, ``host``,
    ``option`` (data=(position, key)), ``keyword``.
    """

    span: Span
    kind: str
    data: Any


@dataclass(frozen=True, slots=True)
class LocalInfo:
    name: str
    kind: str  # parameter | sample | observe | marginalize | let | score | factor | atom | binder | patvar | rule | bound
    type_text: str  # e.g. "Latent", "[Token] Token", "Positive", "numeric"
    detail: str = ""  # e.g. "sample step", plate, rule name
    owner: str = ""  # program or deduction name


@dataclass(frozen=True)
class DeclResult:
    bindings: tuple  # (namespace, name, symbol, relative span)
    diagnostics: tuple[Diagnostic, ...]
    facts: tuple[Fact, ...]
    deps: tuple  # ((key...), answer)
    uses: frozenset  # (namespace, name) used successfully
    suggestions: tuple  # (namespace, suggested, used, how) for companion QVR714
    exports: tuple = ()  # (name or None, relative span)
    composition: Optional[tuple] = None  # (rule, level) set by a composition declaration
    late_composition: bool = False


class Env:
    """The module environment at one point of the top-to-bottom pass."""

    def __init__(self, prescan: dict, lines: list[int], name_spans: dict):
        self.values: dict[str, tuple] = {}  # name -> (symbol, decl index)
        self.types: dict[str, tuple] = {}
        self.prescan = prescan  # (ns, name) -> sorted list of (decl index, line, keyword)
        self.lines = lines  # decl index -> 1-based line of its name
        self.name_spans = name_spans  # (ns, name) -> absolute span of the first declaration
        self.rule = ("product_fuzzy", "algebra")
        self.composition_index: Optional[int] = None
        self.first_body_index: Optional[int] = None
        self.chunk_lines: list[int] = []  # decl index -> 1-based line of the chunk start
        self.chunk_starts: list[int] = []  # decl index -> document offset of the chunk start

    # answers used both by checking and by dependency replay
    def answer(self, key: tuple, index: int):
        kind = key[0]
        if kind == "v":
            e = self.values.get(key[1])
            return e[0] if e else None
        if kind == "t":
            e = self.types.get(key[1])
            return e[0] if e else None
        if kind == "later":
            for i, line, _k in self.prescan.get((key[1], key[2]), ()):
                if i > index:
                    return line
            return None
        if kind == "laterkind":
            for i, line, k in self.prescan.get((key[1], key[2]), ()):
                if i > index:
                    return k
            return None
        if kind == "line":
            e = (self.values if key[1] == "value" else self.types).get(key[2])
            return self.lines[e[1]] if e else None
        if kind == "loc":
            return self.name_spans.get((key[1], key[2]))
        if kind == "rule":
            return self.rule
        if kind == "names":
            table = self.values if key[1] == "value" else self.types
            return frozenset(table)
        if kind == "chunkline":
            return self.chunk_lines[index]
        if kind == "chunkstart":
            return self.chunk_starts[index]
        if kind == "composition_before":
            return self.composition_index is not None
        if kind == "body_before":
            return self.first_body_index is not None and self.first_body_index < index
        if kind == "pretrained":
            from qvr.sema.pretrained import read_model
            return read_model(key[1], None)
        raise KeyError(key)


class DeclContext:
    def __init__(self, env: Env, index: int, text: str):
        self.env = env
        self.index = index
        self.text = text  # the chunk text (for source snippets in messages)
        self.deps: dict = {}
        self.diagnostics: list[Diagnostic] = []
        self.facts: list[Fact] = []
        self.bindings: list = []
        self.uses: set = set()
        self.suggestions: list = []
        self.exports: list = []
        self.composition = None
        self._anchors: set = set()

    # ------------------------------------------------------------ environment reads
    def _ask(self, key: tuple):
        if key in self.deps:
            return self.deps[key]
        ans = self.env.answer(key, self.index)
        self.deps[key] = ans
        return ans

    def value(self, name: str):
        return self._ask(("v", name))

    def object(self, name: str):
        return self._ask(("t", name))

    def later(self, ns: str, name: str) -> Optional[int]:
        return self._ask(("later", ns, name))

    def later_kind(self, ns: str, name: str) -> Optional[str]:
        return self._ask(("laterkind", ns, name))

    def line_of(self, ns: str, name: str) -> Optional[int]:
        return self._ask(("line", ns, name))

    def loc_of(self, ns: str, name: str):
        """The document span of the first declaration of `name` (absolute offsets)."""
        return self._ask(("loc", ns, name))

    def rel_loc_of(self, ns: str, name: str):
        """`loc_of` relative to this declaration's chunk, as diagnostic spans must be
        (they are shifted by the chunk start when the document reports them)."""
        span = self.loc_of(ns, name)
        return span.shift(-self._ask(("chunkstart",))) if span is not None else None

    def line_at(self, rel_offset: int) -> int:
        """1-based document line of a chunk-relative offset (records a position dependency)."""
        return self._ask(("chunkline",)) + self.text.count("\n", 0, rel_offset)

    def rule(self) -> tuple:
        return self._ask(("rule",))

    def names(self, ns: str) -> frozenset:
        return self._ask(("names", ns))

    def pretrained(self, spelled: str):
        """The `qvr.sema.pretrained.ModelInfo` of `model="spelled"` (E10), read relative
        to the module's folder; replayed like every read, so a changed folder re-checks."""
        return self._ask(("pretrained", spelled))

    # ------------------------------------------------------------ outputs
    def report(self, diag: Diagnostic) -> None:
        key = (diag.code, diag.span)
        if key in self._anchors:  # the same code is not reported twice at one anchor
            return
        self._anchors.add(key)
        self.diagnostics.append(diag)

    def fact(self, span: Span, kind: str, data=None) -> None:
        self.facts.append(Fact(span, kind, data))

    def use(self, ns: str, name: str) -> None:
        self.uses.add((ns, name))

    def suggest(self, ns: str, suggested: str, used: str, how: str) -> None:
        self.suggestions.append((ns, suggested, used, how))

    def bind(self, ns: str, name: str, sym, span: Span) -> None:
        self.bindings.append((ns, name, sym, span))

    def snippet(self, span: Span, limit: int = 40) -> str:
        s = " ".join(self.text[span.start:span.end].split())
        return s if len(s) <= limit else s[: limit - 1] + "…"

    def result(self) -> DeclResult:
        return DeclResult(
            tuple(self.bindings),
            tuple(sorted(self.diagnostics, key=lambda d: (d.span.start, d.code))),
            tuple(self.facts),
            tuple(self.deps.items()),
            frozenset(self.uses),
            tuple(self.suggestions),
            tuple(self.exports),
            self.composition,
        )
