"""The module checker: one pass over the top-level statements (qvr-language.md 11.1).

`check_chunks` checks a list of parsed statement chunks top to bottom.  Each declaration's
result is cached by its text; a cached result is reused when replaying the environment
reads it recorded gives the same answers, so an edit re-checks only the declarations
whose text or dependencies changed.  Module-wide diagnostics (QVR710 duplicate exports,
QVR714 companions) are computed afterwards from the per-declaration results.
"""
from __future__ import annotations

import bisect
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
from qvr.syntax import errors as SE
from qvr.syntax.depth import MAX_DEPTH
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


def _bind_unknown(ctx: DeclContext, parsed: ParsedChunk) -> None:
    """A statement with a syntax error: register its readable name as unknown (11.2)."""
    if parsed.name is not None:
        ns = "type" if parsed.keyword == "object" else "value"
        existing = ctx.object(parsed.name.text) if ns == "type" else ctx.value(parsed.name.text)
        if existing is None:
            ctx.bind(ns, parsed.name.text, UnknownSym(parsed.name.text, ns), parsed.name.span)


def check_one(env: Env, index: int, text: str, parsed: ParsedChunk) -> DeclResult:
    ctx = DeclContext(env, index, text)
    decl = parsed.decl
    if decl is None:
        _bind_unknown(ctx, parsed)
        return ctx.result()
    try:
        _CHECKERS[type(decl)](ctx, decl)
    except RecursionError:
        # The parser keeps trees within MAX_DEPTH, which the checker handles with room to
        # spare; this is the net for a caller that is itself deep in the stack: the
        # statement is reported like one nested too deeply and the others are checked.
        ctx = DeclContext(env, index, text)
        _bind_unknown(ctx, parsed)
        start = decl.span.start
        ctx.report(SE.nested_too_deeply(Span(start, start + len(parsed.keyword or " ")), MAX_DEPTH))
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


class CheckCache:
    """DeclResults by (chunk text, kind, statement offset); a few candidates per text."""

    def __init__(self, limit: int = 50000):
        self.entries: dict[tuple, list[DeclResult]] = {}
        self.limit = limit

    def find(self, key, state, index: int) -> Optional[DeclResult]:
        for r in self.entries.get(key, ()):
            if all(state.answer(k, index) == v for k, v in r.deps):
                return r
        return None

    def store(self, key, result: DeclResult) -> None:
        if len(self.entries) > self.limit:
            self.entries.clear()
        lst = self.entries.setdefault(key, [])
        lst.insert(0, result)
        del lst[3:]


_POSITIONAL = frozenset({"later", "laterkind", "line", "loc", "chunkline", "chunkstart"})


class Slot:
    """One statement of the module: its chunk, parse, check result and current index."""

    __slots__ = ("index", "chunk", "parsed", "result", "prescan", "bindings", "keyword")

    def __init__(self, chunk, parsed: ParsedChunk):
        self.index = -1
        self.chunk = chunk
        self.parsed = parsed
        self.result: Optional[DeclResult] = None
        self.prescan = prescan_entries(parsed)
        self.bindings: dict = {}  # (ns, name) -> symbol
        self.keyword = parsed.keyword

    def __lt__(self, other):  # for the worklist heap
        return self.index < other.index


class ModuleState:
    """Module-wide tables over the statement slots, answering the environment reads of
    `DeclContext` for any position, and re-checking only what an edit can affect.

    `bound[(ns, name)]` lists the slots that bind a name, `declared[(ns, name)]` the slots
    that declare it (from the parse, errors included); both are kept in slot order, so
    "the environment before slot i" is "the entries with index < i".  `readers[key]` is
    the reverse of every slot's recorded reads.
    """

    def __init__(self, cache: Optional[CheckCache] = None, base_dir: Optional[str] = None):
        self.cache = cache or CheckCache()
        # the module file's folder: `model="…"` of a pretrained morphism (E10) is read
        # relative to it first
        self.base_dir = base_dir
        self.volatile: set = set()  # slots that read files (E10): re-validated on every edit
        self.slots: list[Slot] = []
        self.starts: list[int] = []
        self.start_lines: list[int] = []
        self.bound: dict[tuple, list[Slot]] = {}
        self.declared: dict[tuple, list[Slot]] = {}
        self.readers: dict[tuple, set] = {}
        self.positional: set = set()  # slots whose reads depend on positions
        self.compositions: list[Slot] = []
        self.bodies: list[Slot] = []
        self.rechecked = 0
        self.use_counts: dict = {}  # (ns, name) -> number of slots using it
        self.export_slots: set = set()
        self.suggest_slots: set = set()
        self.diag_slots: set = set()  # slots with any parse or check diagnostic

    # ------------------------------------------------------------ answers
    def line_of_slot(self, slot: Slot) -> int:
        rel = slot.prescan[0][2] if slot.prescan else 0
        return self.start_lines[slot.index] + slot.chunk.text.count("\n", 0, rel)

    def answer(self, key: tuple, index: int):
        kind = key[0]
        if kind in ("v", "t"):
            ns = "value" if kind == "v" else "type"
            lst = self.bound.get((ns, key[1]))
            s = lst[0] if lst and lst[0].index < index else None
            return s.bindings[(ns, key[1])] if s is not None else None
        if kind in ("later", "laterkind"):
            for s in self.declared.get((key[1], key[2]), ()):
                if s.index > index:
                    return self.line_of_slot(s) if kind == "later" else s.keyword
            return None
        if kind == "line":
            lst = self.bound.get((key[1], key[2]))
            s = lst[0] if lst and lst[0].index < index else None
            return self.line_of_slot(s) if s is not None else None
        if kind == "loc":
            return self.name_span(key[1], key[2])
        if kind == "rule":
            first = self.compositions[0] if self.compositions else None
            if first is not None and first.index < index and first.result is not None \
                    and first.result.composition is not None:
                return first.result.composition
            return ("product_fuzzy", "algebra")
        if kind == "names":
            return frozenset(n for (ns, n), lst in self.bound.items()
                             if ns == key[1] and lst and lst[0].index < index)
        if kind == "chunkline":
            return self.start_lines[index]
        if kind == "chunkstart":
            return self.starts[index]
        if kind == "composition_before":
            return bool(self.compositions) and self.compositions[0].index < index
        if kind == "body_before":
            return bool(self.bodies) and self.bodies[0].index < index
        if kind == "pretrained":
            from qvr.sema.pretrained import read_model
            return read_model(key[1], self.base_dir)
        raise KeyError(key)

    def name_span(self, ns: str, name: str) -> Optional[Span]:
        lst = self.declared.get((ns, name))
        if not lst:
            return None
        s = lst[0]
        for n_ns, n_name, rel in s.prescan:
            if n_ns == ns and n_name == name:
                start = self.starts[s.index] + rel
                return Span(start, start + len(s.parsed.name.text))
        return None

    # ------------------------------------------------------------ table maintenance
    @staticmethod
    def _insert(lst: list, slot: Slot) -> None:
        bisect.insort(lst, slot)

    @staticmethod
    def _discard(lst: list, slot: Slot) -> bool:
        """Remove `slot` from a list sorted by index (indices may be stale: fall back to a scan)."""
        i = bisect.bisect_left(lst, slot)
        if i < len(lst) and lst[i] is slot:
            del lst[i]
            return True
        for k, s in enumerate(lst):
            if s is slot:
                del lst[k]
                return True
        return False

    def _changed_keys_for_names(self, ns, name, out: set) -> None:
        out.add(("v" if ns == "value" else "t", name))
        out.add(("names", ns))
        out.add(("line", ns, name))

    def _add_declared(self, slot: Slot, changed: set) -> None:
        for ns, name, _rel in slot.prescan:
            self._insert(self.declared.setdefault((ns, name), []), slot)
            changed.update({("later", ns, name), ("laterkind", ns, name), ("loc", ns, name)})
        if slot.keyword == "composition":
            self._insert(self.compositions, slot)
            changed.update({("composition_before",), ("rule",)})
        if slot.keyword in BODY_KEYWORDS:
            self._insert(self.bodies, slot)
            changed.add(("body_before",))

    def _remove_slot(self, slot: Slot, changed: set) -> None:
        for ns, name, _rel in slot.prescan:
            lst = self.declared.get((ns, name))
            if lst:
                self._discard(lst, slot)
            changed.update({("later", ns, name), ("laterkind", ns, name), ("loc", ns, name)})
        if slot.keyword == "composition" and self._discard(self.compositions, slot):
            changed.update({("composition_before",), ("rule",)})
        if slot.keyword in BODY_KEYWORDS and self._discard(self.bodies, slot):
            changed.add(("body_before",))
        self._set_bindings(slot, {}, changed)
        self._set_reads(slot, None)
        self._set_result(slot, None)
        self.diag_slots.discard(slot)
        slot.index = -1

    def _set_bindings(self, slot: Slot, new: dict, changed: set) -> None:
        old = slot.bindings
        if old == new:
            return
        for key in old.keys() - new.keys():
            self._discard(self.bound[key], slot)
            self._changed_keys_for_names(*key, changed)
        for key in new.keys() - old.keys():
            self._insert(self.bound.setdefault(key, []), slot)
            self._changed_keys_for_names(*key, changed)
        for key in old.keys() & new.keys():
            if old[key] != new[key]:
                self._changed_keys_for_names(*key, changed)
        slot.bindings = new

    def _set_result(self, slot: Slot, result: Optional[DeclResult]) -> None:
        old = slot.result
        counts = self.use_counts
        if old is not None:
            for u in old.uses:
                counts[u] -= 1
        if result is not None:
            for u in result.uses:
                counts[u] = counts.get(u, 0) + 1
        slot.result = result
        for flag, table in ((result is not None and bool(result.exports), self.export_slots),
                            (result is not None and bool(result.suggestions), self.suggest_slots),
                            (bool(slot.parsed.diagnostics) or (result is not None and bool(result.diagnostics)),
                             self.diag_slots)):
            if flag:
                table.add(slot)
            else:
                table.discard(slot)

    def _set_reads(self, slot: Slot, result: Optional[DeclResult]) -> None:
        if slot.result is not None:
            for k, _v in slot.result.deps:
                r = self.readers.get(k)
                if r is not None:
                    r.discard(slot)
        self.positional.discard(slot)
        self.volatile.discard(slot)
        if result is not None:
            for k, _v in result.deps:
                self.readers.setdefault(k, set()).add(slot)
                if k[0] in _POSITIONAL:
                    self.positional.add(slot)
                elif k[0] == "pretrained":
                    self.volatile.add(slot)

    # ------------------------------------------------------------ updates
    def replace(self, lo: int, hi: int, new_slots: list, starts: list[int], start_lines: list[int],
                moved: bool) -> None:
        """Replace slots[lo:hi] by `new_slots`, then re-check what may have changed.

        `starts`/`start_lines` are the new per-slot positions; `moved` says whether any
        position changed (then position-dependent results are re-validated).
        """
        changed: set = set()
        for s in self.slots[lo:hi]:
            self._remove_slot(s, changed)
        self.slots[lo:hi] = new_slots
        self.starts = starts
        self.start_lines = start_lines
        for i in range(lo, len(self.slots)):
            self.slots[i].index = i
        for s in new_slots:
            self._add_declared(s, changed)
        self.diag_slots.update(s for s in new_slots if s.parsed.diagnostics)
        dirty = set(new_slots) | self.volatile
        if moved:
            dirty |= self.positional
        self._run(dirty, changed)

    def _run(self, dirty: set, changed: set) -> None:
        import heapq

        self.rechecked = 0
        for key in changed:
            dirty |= self.readers.get(key, set())
        heap = list(dirty)
        heapq.heapify(heap)
        seen = set()
        while heap:
            slot = heapq.heappop(heap)
            if slot in seen or slot.index < 0 or slot.index >= len(self.slots) or self.slots[slot.index] is not slot:
                continue
            seen.add(slot)
            i = slot.index
            res = slot.result
            if res is None or not all(self.answer(k, i) == v for k, v in res.deps):
                key = (slot.chunk.clean, slot.chunk.kind, slot.chunk.stmt_at)
                new = self.cache.find(key, self, i)
                if new is None:
                    new = check_one(self, i, slot.chunk.clean, slot.parsed)
                    self.cache.store(key, new)
                    self.rechecked += 1
                self._set_reads(slot, new)
                self._set_result(slot, new)
                local_changed: set = set()
                bindings = {}
                for ns, name, sym, _span in new.bindings:
                    bindings.setdefault((ns, name), sym)
                self._set_bindings(slot, bindings, local_changed)
                if slot.keyword == "composition":
                    local_changed.add(("rule",))
                for key in local_changed:
                    for r in self.readers.get(key, ()):
                        if r.index > i and r not in seen:
                            heapq.heappush(heap, r)

    # ------------------------------------------------------------ module-wide diagnostics
    def module_diagnostics(self) -> list[Diagnostic]:
        out = []
        exported: set[str] = set()
        for slot in sorted(self.export_slots):
            for name, span in slot.result.exports:
                if name is None:
                    continue
                if name in exported:
                    out.append(E.duplicate_export(span.shift(self.starts[slot.index]), name))
                exported.add(name)
        done = set()
        for slot in sorted(self.suggest_slots):
            for ns, s, used, how in slot.result.suggestions:
                if self.use_counts.get((ns, s), 0) > 0 or (ns, s) in done:
                    continue
                span = self.name_span(ns, s)
                if span is None:
                    continue
                done.add((ns, s))
                out.append(E.companion(span, s, used, how))
        return out
