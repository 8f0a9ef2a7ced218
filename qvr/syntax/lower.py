"""Lowering from lark parse trees to the typed AST of `qvr.syntax.ast`.

Only shape conversion happens here (plus reading numbers); no names are resolved.
"""
from __future__ import annotations

from lark import Token, Transformer

from qvr.syntax import ast as A
from qvr.text import Span


def _tsp(tok: Token) -> Span:
    return Span(tok.start_pos, tok.end_pos)


def _msp(meta) -> Span:
    return Span(meta.start_pos, meta.end_pos)


def _name(tok: Token) -> A.Name:
    return A.Name(str(tok), _tsp(tok))


def _number(toks) -> A.Number:
    neg = toks[0].type == "MINUS"
    lit = toks[-1]
    text = str(lit)
    is_int = lit.type == "INT"
    value = int(text) if is_int else float(text)
    if neg:
        value = -value
        text = "-" + text
    return A.Number(value, is_int, text, Span(toks[0].start_pos, lit.end_pos))


def _draw_arg(e):
    """A family argument (7.5) from the let-expression parsed there (extension E9.10): a
    number (`-1.0` too), a name, `a[z]` (a `DAIndex`, the checker decides whether it is
    a bracketed argument), else the expression itself."""
    if isinstance(e, A.ENeg) and isinstance(e.operand, A.Number):
        n = e.operand
        return A.Number(-n.value, n.is_int, "-" + n.text, e.span)
    if isinstance(e, A.EName):
        return e.name
    if isinstance(e, A.EIndex) and len(e.indices) == 1 and isinstance(e.indices[0], A.EName):
        return A.DAIndex(e.base, e.indices[0].name, e.span, e)
    return e


_PUNCT = {"LPAR", "RPAR", "LSQB", "RSQB", "LBRACE", "RBRACE", "EQUAL", "ARROW", "LARROW",
          "DOT", "TILDE", "AT", "PRAGMA_OPEN", "TURNSTILE", "STAR", "AS", "IN", "COMMA"}


def _strip(children):
    return [c for c in children if not (isinstance(c, Token) and c.type in _PUNCT)]


def _let_axes(children):
    """`let v : T = e` (extension E9.11): the type naming the value's leading axes, or None
    (the `:` is filtered out, so the type is the third child when there is one)."""
    c = children[2]
    return None if isinstance(c, Token) and c.type == "EQUAL" else c


class _Seq(tuple):
    """A tuple of children that remembers its source span (call arguments, where blocks)."""


class _Meta:
    """Start/end offsets of a rule from its children (lark's meta is unavailable when the
    transformer runs inside the parser); trailing layout tokens are never included."""

    __slots__ = ("start_pos", "end_pos")

    def __init__(self, children):
        first = last = None
        for c in children:
            s = _start(c)
            if s is not None:
                first = s
                break
        for c in reversed(children):
            e = _end(c)
            if e is not None:
                last = e
                break
        self.start_pos = first if first is not None else 0
        self.end_pos = last if last is not None else self.start_pos


def _start(c):
    if isinstance(c, Token):
        return None if c.type.startswith("_") else c.start_pos
    if isinstance(c, _Seq):
        return c.span.start if hasattr(c, "span") else None
    if isinstance(c, tuple):
        return _start(c[0]) if c else None
    span = getattr(c, "span", None)
    return span.start if span is not None else None


def _end(c):
    if isinstance(c, Token):
        return None if c.type.startswith("_") else c.end_pos
    if isinstance(c, _Seq):
        return c.span.end if hasattr(c, "span") else None
    if isinstance(c, tuple):
        return _end(c[-1]) if c else None
    span = getattr(c, "span", None)
    return span.end if span is not None else None


def _with_span(items, meta) -> _Seq:
    seq = _Seq(items)
    seq.span = Span(meta.start_pos, meta.end_pos)
    return seq


class ToAst(Transformer):
    # ------------------------------------------------------------ start
    def start(self, meta, children):
        return [c for c in children if not isinstance(c, Token)]

    # ------------------------------------------------------------ types
    def type(self, meta, children):
        factors = tuple(c for c in children if not isinstance(c, Token))
        if len(factors) == 1:
            return factors[0]
        return A.TProd(factors, _msp(meta))

    def type_name(self, meta, children):
        return A.TName(_name(children[0]), _msp(meta))

    def _atom(self, kind, meta, children):
        kw, size = children
        return A.TAtom(kind, int(size), _tsp(kw), _tsp(size), _msp(meta))

    def type_finset(self, meta, children):
        return self._atom("FinSet", meta, children)

    def type_real(self, meta, children):
        return self._atom("Real", meta, children)

    def type_finset_name(self, meta, children):
        return A.TSize("FinSet", _name(children[1]), _tsp(children[0]), _msp(meta))

    def type_real_name(self, meta, children):
        return A.TSize("Real", _name(children[1]), _tsp(children[0]), _msp(meta))

    def type_paren(self, meta, children):
        return A.TParen(children[1], _msp(meta))

    def space_type(self, meta, children):
        # extension E9.2: a constrained space `Ordered 2` on an object's right-hand side,
        # an atom whose kind is the constructor's name (the checker knows which exist)
        kw, size = children
        return A.TAtom(str(kw), int(size), _tsp(kw), _tsp(size), _msp(meta))

    # ------------------------------------------------------------ options
    def option_block(self, meta, children):
        return A.OptionBlock(tuple(_strip(children)), _msp(meta))

    def option_entry(self, meta, children):
        key = _name(children[0])
        value = children[2] if len(children) > 2 else None
        return A.OptionEntry(key, value, _msp(meta))

    def ov_name(self, meta, children):
        return A.OVName(str(children[0]), _tsp(children[0]))

    def ov_string(self, meta, children):
        return A.StringLit(str(children[0]), _tsp(children[0]))

    def ov_list(self, meta, children):
        return A.OVList(tuple(_strip(children)), _msp(meta))

    def ov_call(self, meta, children):
        rest = _strip(children)
        return A.OVCall(_name(rest[0]), tuple(rest[1:]), _msp(meta))

    def signed_number(self, meta, children):
        return _number(children)

    # ------------------------------------------------------------ morphism expressions
    def m_name(self, meta, children):
        return A.MName(_name(children[0]), _msp(meta))

    def m_call(self, meta, children):
        return A.MCall(_name(children[0]), children[1], _msp(meta))

    def call_args(self, meta, children):
        return _with_span(_strip(children), meta)

    def ca_string(self, meta, children):
        return A.StringLit(str(children[0]), _tsp(children[0]))

    def m_paren(self, meta, children):
        return A.MParen(children[1], _msp(meta))

    def m_fan(self, meta, children):
        kw = children[0]
        return A.MFan(_tsp(kw), tuple(_strip(children[1:])), _msp(meta))

    def m_stack(self, meta, children):
        kw, _, arg, count, _ = children
        return A.MStack(_tsp(kw), arg, int(count), _tsp(count), _msp(meta))

    def m_repeat(self, meta, children):
        kw = children[0]
        rest = _strip(children[1:])
        arg = rest[0]
        count = rest[1] if len(rest) > 1 else None
        return A.MRepeat(_tsp(kw), arg, int(count) if count is not None else None,
                         _tsp(count) if count is not None else None, _msp(meta))

    def m_scan(self, meta, children):
        kw = children[0]
        rest = _strip(children[1:])
        init = (_name(rest[1]), _name(rest[2])) if len(rest) > 1 else None
        return A.MScan(_tsp(kw), rest[0], init, _msp(meta))

    def m_compose(self, meta, children):
        left, op, right = children
        return A.MCompose(left, _name(op), right, _msp(meta))

    def m_tensor(self, meta, children):
        left, op, right = children
        return A.MTensor(left, _tsp(op), right, _msp(meta))

    def m_postfix(self, meta, children):
        base, _dot, name = children[:3]
        args = children[3] if len(children) > 3 else None
        return A.MPostfix(base, _name(name), args, _msp(meta))

    # ------------------------------------------------------------ declarations
    def composition_decl(self, meta, children):
        kw, name = children[0], children[1]
        level = _name(children[3]) if len(children) > 3 else None
        return A.CompositionDecl(_tsp(kw), _name(name), level, _msp(meta))

    def object_decl(self, meta, children):
        kw, name, typ = children[:3]
        opts = children[3] if len(children) > 3 else None
        return A.ObjectDecl(_tsp(kw), _name(name), typ, opts, _msp(meta))

    def morphism_decl(self, meta, children):
        kw, name, dom, _arrow, cod = children[:5]
        opts = init = None
        for c in children[5:]:
            if isinstance(c, A.OptionBlock):
                opts = c
            elif isinstance(c, A.MorphInit):
                init = c
        return A.MorphismDecl(_tsp(kw), _name(name), dom, cod, opts, init, _msp(meta))

    def morph_init(self, meta, children):
        return A.MorphInit(_tsp(children[0]), children[1], _msp(meta))

    def let_decl(self, meta, children):
        kw, name, _eq, expr = children[:4]
        where = where_kw = None
        if len(children) > 4:
            where_kw, where = children[4]
        return A.LetDecl(_tsp(kw), _name(name), expr, where, where_kw, _msp(meta))

    def where_block(self, meta, children):
        return _with_span((_tsp(children[0]), tuple(children[1:])), meta)

    def export_decl(self, meta, children):
        return A.ExportDecl(_tsp(children[0]), children[1], _msp(meta))

    # ------------------------------------------------------------ programs
    def program_decl(self, meta, children):
        kw, name = children[0], children[1]
        i = 2
        params = None
        if isinstance(children[i], A.Params):
            params = children[i]
            i += 1
        dom, cod = children[i], children[i + 2]
        i += 3
        opts = None
        if i < len(children) and isinstance(children[i], A.OptionBlock):
            opts = children[i]
            i += 1
        body = tuple(children[i:])
        header_end = (opts.span.end if opts else cod.span.end)
        return A.ProgramDecl(_tsp(kw), _name(name), params, dom, cod, opts, body,
                             Span(kw.start_pos, header_end), _msp(meta))

    def params(self, meta, children):
        return A.Params(tuple(_strip(children)), _msp(meta))

    def param(self, meta, children):
        kind = children[1] if len(children) > 1 else None
        return A.Param(_name(children[0]), kind, _msp(meta))

    def pk_real(self, meta, children):
        return A.ParamKind("Real", None, _msp(meta))

    def pk_finset(self, meta, children):
        return A.ParamKind("FinSet", None, _msp(meta))

    def pk_name(self, meta, children):
        return A.ParamKind("name", _name(children[0]), _msp(meta))

    def pk_mor(self, meta, children):
        return A.ParamKind("mor", _name(children[0]), _msp(meta))

    def _step_parts(self, children):
        """(kw, bind, index, target, options) from a sample/observe/marginalize header."""
        kw, bind = children[0], children[1]
        index = target = opts = None
        for c in children[2:]:
            if isinstance(c, A.Target):
                target = c
            elif isinstance(c, A.OptionBlock):
                opts = c
            elif isinstance(c, Token):
                continue
            elif target is None:
                index = c
        if isinstance(bind, Token):
            bind = _name(bind)
        return _tsp(kw), bind, index, target, opts

    def sample_step(self, meta, children):
        kw, bind, index, target, opts = self._step_parts(children)
        return A.SampleStep(kw, bind, index, target, opts, _msp(meta))

    def observe_step(self, meta, children):
        value = None
        for i, c in enumerate(children):  # `= e` (E9.7): the expression after the `=`
            if isinstance(c, Token) and c.type == "EQUAL":
                value = children[i + 1]
                children = children[:i] + children[i + 2:]
                break
        kw, bind, index, target, opts = self._step_parts(children)
        return A.ObserveStep(kw, bind, index, target, opts, _msp(meta), value)

    def marginalize_step(self, meta, children):
        head = []
        body = []
        for c in children:
            if isinstance(c, (A.SampleStep, A.ObserveStep, A.MarginalizeStep, A.LetStep,
                              A.ScoreStep, A.ReturnStep, A.DataStep)):
                body.append(c)
            else:
                head.append(c)
        kw, bind, index, target, opts = self._step_parts(head)
        header_end = opts.span.end if opts else target.span.end
        return A.MarginalizeStep(kw, bind, index, target, opts, tuple(body),
                                 Span(kw.start, header_end), _msp(meta))

    def tuple_bind(self, meta, children):
        return A.TupleBind(tuple(_name(c) for c in _strip(children)), _msp(meta))

    def let_step(self, meta, children):
        return A.LetStep(_tsp(children[0]), _name(children[1]), children[-1], _msp(meta),
                         index=_let_axes(children))

    def record_step(self, meta, children):
        return A.LetStep(_tsp(children[0]), _name(children[1]), children[-1], _msp(meta),
                         recorded=True, index=_let_axes(children))

    def data_step(self, meta, children):
        return A.DataStep(_tsp(children[0]), _name(children[1]), children[2], _msp(meta))

    def score_step(self, meta, children):
        index = None
        if not (isinstance(children[2], Token) and children[2].type == "EQUAL"):
            index = children[2]  # `score v : T = e` (E9.7); the `:` is filtered out
        return A.ScoreStep(_tsp(children[0]), _name(children[1]), children[-1], _msp(meta),
                           index)

    def return_step(self, meta, children):
        value = children[1]
        if isinstance(value, Token):
            value = _name(value)
        return A.ReturnStep(_tsp(children[0]), value, _msp(meta))

    def tuple_return(self, meta, children):
        return A.TupleReturn(tuple(_strip(children)), _msp(meta))

    def return_item(self, meta, children):
        rest = _strip(children)
        return _with_span((_name(rest[0]), _name(rest[1]) if len(rest) > 1 else None), meta)

    def target(self, meta, children):
        rest = _strip(children)
        args = tuple(_draw_arg(a) for a in rest[1:]) if len(children) > 1 else None
        return A.Target(_name(rest[0]), args, _msp(meta))

    # ------------------------------------------------------------ let-expressions
    def factor_expr(self, meta, children):
        kw = children[0]
        binders = tuple(c for c in children[1:] if isinstance(c, A.FactorBinder))
        body = children[-1]
        return A.EFactor(_tsp(kw), binders, body, _msp(meta))

    def factor_binder(self, meta, children):
        return A.FactorBinder(_name(children[0]), children[1], _msp(meta))

    def factor_cases(self, meta, children):
        return A.FactorCases(tuple(_strip(children)), _msp(meta))

    def factor_case(self, meta, children):
        label = children[0]
        return A.FactorCase(int(label), _tsp(label), children[2], _msp(meta))

    def e_binop(self, meta, children):
        left, op, right = children
        return A.EBinOp(str(op), _tsp(op), left, right, _msp(meta))

    def e_neg(self, meta, children):
        return A.ENeg(_tsp(children[0]), children[1], _msp(meta))

    def e_not(self, meta, children):  # extension E9.10
        return A.ENot(_tsp(children[0]), children[1], _msp(meta))

    def e_int(self, meta, children):
        return _number(children)

    e_float = e_int

    def e_string(self, meta, children):
        return A.StringLit(str(children[0]), _tsp(children[0]))

    def e_name(self, meta, children):
        return A.EName(_name(children[0]), _msp(meta))

    def e_call(self, meta, children):
        rest = _strip(children)
        return A.ECall(_name(rest[0]), tuple(rest[1:]), _msp(meta))

    def e_method(self, meta, children):
        rest = _strip(children)
        return A.EMethod(_name(rest[0]), _name(rest[1]), tuple(rest[2:]), _msp(meta))

    def e_index(self, meta, children):
        rest = _strip(children)
        return A.EIndex(_name(rest[0]), tuple(rest[1:]), _msp(meta))

    def e_slice(self, meta, children):  # extension E9: `start:stop` in an index
        i = next(k for k, c in enumerate(children) if isinstance(c, Token) and c.type == "COLON")
        start = children[0] if i > 0 else None
        stop = children[i + 1] if i + 1 < len(children) else None
        return A.ESlice(start, _tsp(children[i]), stop, _msp(meta))

    def e_list(self, meta, children):
        return A.EList(tuple(_strip(children)), _msp(meta))

    def e_paren(self, meta, children):
        return A.EParen(children[1], _msp(meta))

    def e_lambda(self, meta, children):
        names = tuple(_name(c) for c in children
                      if isinstance(c, Token) and c.type == "NAME")
        return A.ELambda(names, children[-1], _msp(meta))

    # ------------------------------------------------------------ deductions
    def deduction_decl(self, meta, children):
        kw, name, dom, _arrow, cod = children[:5]
        rest = children[5:]
        opts = None
        if rest and isinstance(rest[0], A.OptionBlock):
            opts = rest[0]
            rest = rest[1:]
        header_end = opts.span.end if opts else cod.span.end
        return A.DeductionDecl(_tsp(kw), _name(name), dom, cod, opts, tuple(rest),
                               Span(kw.start_pos, header_end), _msp(meta))

    def atoms_entry(self, meta, children):
        return A.AtomsEntry(_tsp(children[0]), tuple(_name(c) for c in children[1:]), _msp(meta))

    def binders_entry(self, meta, children):
        return A.BindersEntry(_tsp(children[0]), tuple(_name(c) for c in children[1:]), _msp(meta))

    def rule_entry(self, meta, children):
        kw, name = children[0], children[1]
        pats = []
        turn = None
        pragma = None
        for c in children[2:]:
            if isinstance(c, Token) and c.type == "TURNSTILE":
                turn = c
            elif isinstance(c, A.Pragma):
                pragma = c
            elif isinstance(c, A.Pattern):
                pats.append(c)
        return A.RuleEntry(_tsp(kw), _name(name), tuple(pats[:-1]), _tsp(turn), pats[-1],
                           pragma, _msp(meta))

    def lexicon_block(self, meta, children):
        return A.LexiconBlock(_tsp(children[0]), tuple(children[1:]), _msp(meta))

    def lexicon_file(self, meta, children):
        kw, _from, path = children[:3]
        opts = children[3] if len(children) > 3 else None
        return A.LexiconFile(_tsp(kw), A.StringLit(str(path), _tsp(path)), opts, _msp(meta))

    def lex_item(self, meta, children):
        word, cat, _eq, lf = children[:4]
        pragma = children[4] if len(children) > 4 else None
        return A.LexItem(A.StringLit(str(word), _tsp(word)), cat, lf, pragma, _msp(meta))

    def cat_star(self, meta, children):
        return A.CatStar(_msp(meta))

    def cat_set(self, meta, children):
        return A.CatSet(tuple(_name(c) for c in _strip(children)), _msp(meta))

    def pattern(self, meta, children):
        rest = _strip(children)
        args = tuple(rest[1:]) if len(children) > 1 else None
        return A.Pattern(_name(rest[0]), args, _msp(meta))

    def pragma(self, meta, children):
        return A.Pragma(tuple(_strip(children)), _msp(meta))

    def pragma_entry(self, meta, children):
        value = children[2] if len(children) > 2 else None
        return A.PragmaEntry(_name(children[0]), value, _msp(meta))


def _wrap(fn):
    def callback(self, children):
        return fn(self, _Meta(children), children)
    callback.__name__ = fn.__name__
    return callback


for _name_ in [k for k, v in list(vars(ToAst).items()) if callable(v) and not k.startswith("_")]:
    setattr(ToAst, _name_, _wrap(vars(ToAst)[_name_]))
