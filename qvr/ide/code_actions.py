"""Quick fixes for the diagnostics of the catalogue that have an obvious fix.

* did-you-mean (every diagnostic whose data carries a suggestion: QVR001, QVR101, QVR102,
  QVR106, QVR108, QVR109, QVR201, QVR204, QVR501-QVR505, QVR601, QVR701, QVR705, …):
  replace the name by the suggestion;
* QVR101: declare the missing object; QVR102: declare a morphism stub whose type is read
  off the neighbouring operands of `>>` when they have one;
* QVR104 (duplicate declaration or rule), QVR202 (duplicate option key), QVR710
  (duplicate export or atom): remove the duplicate;
* QVR316 on an attention without a family (the observed or sampled target itself): give
  its declaration the family `~ Normal` (docs/extensions.md E2).

New declarations go just before the statement that needs them (above its doc comments),
so they are declared before use.  Fixes are plain text edits in document offsets; the
diagnostics are the document's own (`Document.diagnostics`).  No LSP types here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from qvr.diagnostics import Diagnostic, TextEdit
from qvr.sema.types import is_continuous, is_discrete, spell
from qvr.syntax import ast as A
from qvr.text import Span


@dataclass(frozen=True)
class CodeAction:
    title: str
    edits: tuple[TextEdit, ...]
    diagnostic: Optional[Diagnostic] = None
    kind: str = "quickfix"
    preferred: bool = False


def code_actions(doc, span: Span) -> list[CodeAction]:
    out = []
    for d in doc.diagnostics():
        if d.span.end < span.start or d.span.start > span.end:
            continue
        out.extend(fixes_for(doc, d))
    return out


def fixes_for(doc, d: Diagnostic) -> list[CodeAction]:
    out = []
    suggestion = dict(d.data).get("suggest") if d.data else None
    name = doc.text[d.span.start:d.span.end]
    if suggestion and suggestion != name:
        out.append(CodeAction(f"Change `{name}` to `{suggestion}`", (TextEdit(d.span, suggestion),), d,
                              preferred=True))
    if d.code == "QVR101" and name.isidentifier():
        out.append(CodeAction(f"Declare object `{name}`", (_insert_before(doc, d.span.start,
                                                                           f"object {name} : FinSet 2\n"),), d))
    elif d.code == "QVR102" and name.isidentifier():
        out.append(CodeAction(f"Declare morphism `{name}`",
                              (_insert_before(doc, d.span.start, _morphism_stub(doc, d.span, name)),), d))
    elif d.code in ("QVR104", "QVR710", "QVR202"):
        edit = _remove_duplicate(doc, d)
        if edit is not None:
            out.append(CodeAction(f"Remove duplicate `{name}`", (edit,), d))
    elif d.code == "QVR316":
        target = dict(d.data).get("family_for") if d.data else None
        at = _declaration_end(doc, target) if target else None
        if at is not None:
            out.append(CodeAction(f"Give `{target}` a family (`~ Normal`)",
                                  (TextEdit(Span(at, at), " ~ Normal"),), d, preferred=True))
    return out


def _declaration_end(doc, name: str) -> Optional[int]:
    """The document offset just after the header of morphism `name`'s declaration (its
    options block, or its codomain), when it is declared once, without an initializer."""
    found = []
    for slot, base in zip(doc.state.slots, doc.state.starts):
        decl = slot.parsed.decl if slot.parsed is not None else None
        if isinstance(decl, A.MorphismDecl) and decl.name.text == name and decl.init is None:
            end = decl.options.span.end if decl.options is not None else decl.cod.span.end
            found.append(base + end)
    return found[0] if len(found) == 1 else None


# ---------------------------------------------------------------- helpers

def _slot(doc, offset: int):
    st = doc.state
    i = doc.chunk_at(offset)
    return st.slots[i], st.starts[i]


def _statement_start(doc, slot, base: int) -> int:
    """Where the statement begins, including the doc comments right above it."""
    text = doc.text
    at = base + slot.chunk.stmt_at
    while at > base:
        prev_end = at - 1  # the '\n' ending the previous line
        prev_start = text.rfind("\n", 0, prev_end) + 1
        line = text[prev_start:prev_end].strip()
        if prev_start < base or not (line.startswith("##") or (line.startswith("#!") and not line.startswith("#!["))):
            break
        at = prev_start
    return at


def _insert_before(doc, offset: int, text: str) -> TextEdit:
    slot, base = _slot(doc, offset)
    at = _statement_start(doc, slot, base)
    return TextEdit(Span(at, at), text)


def _nodes(node):
    if isinstance(node, tuple):
        for n in node:
            yield from _nodes(n)
    elif dataclasses.is_dataclass(node):
        yield node
        for f in dataclasses.fields(node):
            yield from _nodes(getattr(node, f.name))


def _edge(e, left: bool):
    """The leftmost (or rightmost) operand of a `>>` chain."""
    while isinstance(e, A.MCompose):
        e = e.left if left else e.right
    return e


def _morphism_stub(doc, span: Span, name: str) -> str:
    slot, base = _slot(doc, span.start)
    rel = span.shift(-base)
    types = {f.span: f.data[0] for f in (slot.result.facts if slot.result else ()) if f.kind == "expr"}
    dom = cod = None
    for node in _nodes(slot.parsed.decl):
        if not isinstance(node, A.MCompose):
            continue
        r, l = _edge(node.right, True), _edge(node.left, False)
        if isinstance(r, A.MName) and r.name.span == rel and node.left.span in types:
            dom = types[node.left.span].cod
        if isinstance(l, A.MName) and l.name.span == rel and node.right.span in types:
            cod = types[node.right.span].dom
    dom_text = spell(dom) if dom is not None else "Real 1"
    cod_text = spell(cod) if cod is not None else (dom_text if dom is not None else "Real 1")
    if cod is None:
        cod = dom
    if cod is not None and is_discrete(cod):
        init = "[role=latent]" if dom is not None and is_discrete(dom) else "[role=kernel] ~ Categorical"
    elif cod is None or is_continuous(cod):
        init = "[role=kernel] ~ Normal"
    else:
        init = "[role=kernel] ~ Normal"
    return f"morphism {name} : {dom_text} -> {cod_text} {init}\n"


def _line_span(doc, offset: int) -> Span:
    text = doc.text
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return Span(start, len(text) if end < 0 else end + 1)


def _remove_duplicate(doc, d: Diagnostic) -> Optional[TextEdit]:
    slot, base = _slot(doc, d.span.start)
    rel = d.span.shift(-base)
    parsed = slot.parsed
    decl = parsed.decl
    whole_statement = (d.code == "QVR104" and parsed.name is not None and parsed.name.span == rel) or \
        (d.code == "QVR710" and isinstance(decl, A.ExportDecl))
    if whole_statement:
        start = _statement_start(doc, slot, base)
        return TextEdit(Span(start, base + len(slot.chunk.text)), "")
    if decl is None:
        return None
    for node in _nodes(decl):
        if d.code == "QVR104" and isinstance(node, A.RuleEntry) and node.name.span == rel:
            return TextEdit(_line_span(doc, base + node.span.start), "")
        if d.code == "QVR202" and isinstance(node, (A.OptionBlock, A.Pragma)):
            entries = node.entries
            for k, e in enumerate(entries):
                if e.key.span == rel and k > 0:
                    return TextEdit(Span(base + entries[k - 1].span.end, base + e.span.end), "")
        if d.code == "QVR710" and isinstance(node, A.AtomsEntry):
            names = node.names
            for k, n in enumerate(names):
                if n.span == rel and k > 0:
                    return TextEdit(Span(base + names[k - 1].span.end, base + n.span.end), "")
    return None
