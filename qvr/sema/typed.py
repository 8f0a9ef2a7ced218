"""The checked module as the runtime sees it: declarations in order with their symbols.

`typed_module(text)` parses and checks a whole module (non-incrementally) and returns a
`TypedModule`: every top-level declaration's AST next to the symbols it bound, the module's
diagnostics, the exports, and helpers to read option values.  This is the read-only
boundary between the front end and `qvr.runtime`; it holds no editor concepts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from qvr.diagnostics import Diagnostic
from qvr.sema.module import ModuleState, Slot
from qvr.syntax import ast as A
from qvr.syntax.chunks import split
from qvr.syntax.parser import parse_chunk
from qvr.text import LineIndex, Span


@dataclass(frozen=True)
class TypedDecl:
    decl: A.Decl  # the AST; spans relative to `start`
    start: int  # document offset of the statement's chunk
    text: str  # the chunk text (spans index into it)
    bindings: dict  # (namespace, name) -> symbol, as registered by this declaration

    def source(self, node) -> str:
        """The source text of an AST node of this declaration."""
        return self.text[node.span.start:node.span.end]


@dataclass
class TypedModule:
    text: str
    path: str
    decls: list[TypedDecl]
    diagnostics: list[Diagnostic]
    composition: tuple = ("product_fuzzy", "algebra")  # the declared rule and its level
    _symbols: dict = field(default_factory=dict)
    _lines: Optional[LineIndex] = None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    def symbol(self, ns: str, name: str):
        """The symbol of a top-level name (the first declaration wins), or None."""
        return self._symbols.get((ns, name))

    def exports(self) -> list[tuple[Optional[str], A.MorphExpr, TypedDecl]]:
        """(name or None for an expression export, expression, declaration) in order."""
        out = []
        for td in self.decls:
            if isinstance(td.decl, A.ExportDecl):
                e = td.decl.expr
                out.append((e.name.text if isinstance(e, A.MName) else None, e, td))
        return out

    def location(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a document offset, for messages."""
        if self._lines is None:
            self._lines = LineIndex(self.text)
        p = self._lines.position(offset)
        return p.line + 1, p.character + 1

    def format_diagnostic(self, d: Diagnostic) -> str:
        line, col = self.location(d.span.start)
        return f"{self.path}:{line}:{col}: {d.severity}[{d.code}]: {d.message}"


def option_values(block: Optional[A.OptionBlock]) -> dict:
    """Option entries as Python values: numbers, names (str), strings, lists; flags -> True.

    The first entry of a key wins (the checker reports duplicates)."""
    out: dict = {}
    if block is None:
        return out

    def value(v):
        if v is None:
            return True
        if isinstance(v, A.Number):
            return v.value
        if isinstance(v, A.OVName):
            return v.text
        if isinstance(v, A.StringLit):
            return v.value
        if isinstance(v, A.OVList):
            return [value(i) for i in v.items]
        return None

    for e in block.entries:
        out.setdefault(e.key.text, value(e.value))
    return out


def typed_module(text: str, path: str = "<memory>") -> TypedModule:
    text = text.replace("\r\n", "\n")
    parts, _ = split(text)
    slots = [Slot(c, parse_chunk(c)) for _, c in parts]
    lines, line = [], 1
    for s in slots:
        lines.append(line)
        line += s.chunk.text.count("\n")
    from qvr.sema.pretrained import base_dir_of
    state = ModuleState(base_dir=base_dir_of(path))
    state.replace(0, 0, slots, [p for p, _ in parts], lines, moved=False)
    diags = []
    decls = []
    symbols: dict = {}
    composition = ("product_fuzzy", "algebra")
    for slot in state.slots:
        start = state.starts[slot.index]
        diags.extend(d.shift(start) for d in slot.parsed.diagnostics)
        if slot.result is not None:
            diags.extend(d.shift(start) for d in slot.result.diagnostics)
            if slot.result.composition is not None and composition == ("product_fuzzy", "algebra"):
                composition = slot.result.composition
        for key, sym in slot.bindings.items():
            symbols.setdefault(key, sym)
        if slot.parsed.decl is not None:
            decls.append(TypedDecl(slot.parsed.decl, start, slot.chunk.text, dict(slot.bindings)))
    diags.extend(state.module_diagnostics())
    diags.sort(key=lambda d: (d.span.start, d.span.end, d.code))
    return TypedModule(text, path, decls, diags, composition, symbols)
