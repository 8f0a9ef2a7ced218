"""The nesting limit: how deep a statement's syntax tree may be.

Every later pass (the checker, the formatter, the editor queries, the runtime compiler)
walks trees recursively, a few Python frames per level.  A statement nested deeper than
`MAX_DEPTH` (brackets, calls, indented blocks and chained operators each add a level; a
chain `a >> b >> c` is as deep as it is long) is reported as QVR010 by the parser and never
reaches them, so a hostile file cannot exhaust Python's recursion limit.  `MAX_DEPTH` is far
above anything written by hand (the examples stay below 15) and far below the default
recursion limit of 1000 frames divided by the frames a pass spends per level.

This module measures depth without recursion; it knows nothing of what the nodes mean.
"""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Optional

from qvr.text import Span

MAX_DEPTH = 200

_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls) if f.name != "span")
    return names


def _children(node) -> list:
    """The child nodes of `node` in source order (tuples of children flattened)."""
    out = []
    todo = [getattr(node, name) for name in reversed(_field_names(type(node)))]
    while todo:
        v = todo.pop()
        if isinstance(v, tuple):
            todo.extend(reversed(v))
        elif is_dataclass(v) and not isinstance(v, (Span, type)) and hasattr(v, "span"):
            out.append(v)
    return out


def child_nodes(node) -> list:
    """The child nodes of an AST node in source order (tuples of children flattened): the
    generic walk step shared by passes that look through expressions (`qvr.sema`)."""
    return _children(node)


def too_deep(root, limit: int = MAX_DEPTH) -> Optional[object]:
    """The first node (in source order) deeper than `limit` levels, or None.

    The root is level 1; each node with a span adds a level, tuples of children do not."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return node
        stack.extend((c, depth + 1) for c in reversed(_children(node)))
    return None
