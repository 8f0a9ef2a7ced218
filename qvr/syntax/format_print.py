"""Canonical printing of one top-level statement from its AST (see `qvr.syntax.format`).

`Printer.decl` emits the tokens of a declaration in source order through the
comment-aware `Cursor`, choosing spacing, line breaks and indentation; the cursor checks
each token against the source and places the comments.  Names, numbers and strings are
printed as written (taken from the source token).  This module holds the canonical style
of every construct and nothing else: chunking, comment placement between statements and
the safety checks live in `qvr.syntax.format`.
"""
from __future__ import annotations

from qvr.syntax import ast as A
from qvr.syntax.format_writer import Cursor, Mismatch


class Printer(Cursor):
    # ------------------------------------------------------------ small pieces
    def name(self, n: A.Name, sp: bool = True) -> None:
        self.tk(n.text, sp)

    def number(self, n: A.Number, sp: bool = True) -> None:
        if n.text.startswith("-"):
            self.tk("-", sp, glue=True)
            self.tk(n.text[1:])
        else:
            self.tk(n.text, sp)

    def lit(self, x, sp: bool = True) -> None:
        """A number, string or name: the source token as written."""
        if isinstance(x, A.Number):
            self.number(x, sp)
        else:
            self.tk(x.text, sp)

    def commas(self, entries, fn) -> None:
        """An unbracketed comma list (atoms, binders, premises, factor binders)."""
        for k, e in enumerate(entries):
            if k:
                self.tk(",", sp=False)
            fn(e)

    def options(self, block: A.OptionBlock) -> None:
        self.seq("[", block.entries, self.option_entry, "]", trailing=True, sp=True)

    def option_entry(self, e) -> None:  # OptionEntry and PragmaEntry
        self.name(e.key)
        if e.value is not None:
            self.tk("=", sp=False, glue=True)
            self.opt_value(e.value)

    def opt_value(self, v) -> None:
        if isinstance(v, A.OVList):
            self.seq("[", v.items, self.opt_value, "]", trailing=True)
        elif isinstance(v, A.OVCall):
            self.name(v.name)
            self.seq("(", v.args, self.opt_value, ")", trailing=False, sp=False)
        elif isinstance(v, A.OVName):
            self.tk(v.text)
        else:
            self.lit(v)

    def pragma(self, p: A.Pragma) -> None:
        self.seq("#[", p.entries, self.option_entry, "]", trailing=True, sp=True)

    # ------------------------------------------------------------ types
    def type(self, t) -> None:
        if isinstance(t, A.TName):
            self.name(t.name)
        elif isinstance(t, A.TAtom):
            self.tk(t.kind)
            self.tk()
        elif isinstance(t, A.TSize):
            self.tk(t.kind)
            self.name(t.name)
        elif isinstance(t, A.TProd):
            for k, f in enumerate(t.factors):
                if k:
                    self.tk("*")
                self.type(f)
        elif isinstance(t, A.TParen):
            self.seq("(", [t.inner], self.type, ")", trailing=False)
        else:  # pragma: no cover - every type node is handled
            raise Mismatch(f"type {type(t).__name__}")

    # ------------------------------------------------------------ morphism expressions
    def mexpr(self, e) -> None:
        if isinstance(e, A.MName):
            self.name(e.name)
        elif isinstance(e, A.MCompose):
            self.mexpr(e.left)
            self.tk(e.op.text)
            self.mexpr(e.right)
        elif isinstance(e, A.MTensor):
            self.mexpr(e.left)
            self.tk("@")
            self.mexpr(e.right)
        elif isinstance(e, A.MPostfix):
            self.mexpr(e.base)
            self.tk(".", sp=False, glue=True)
            self.name(e.name)
            if e.args is not None:
                self.seq("(", e.args, self.call_arg, ")", trailing=False, sp=False)
        elif isinstance(e, A.MCall):
            self.name(e.callee)
            self.seq("(", e.args, self.call_arg, ")", trailing=False, sp=False)
        elif isinstance(e, A.MParen):
            self.seq("(", [e.inner], self.mexpr, ")", trailing=False)
        elif isinstance(e, A.MFan):
            self.tk("fan")
            self.seq("(", e.args, self.mexpr, ")", trailing=False, sp=False)
        elif isinstance(e, (A.MStack, A.MRepeat)):
            self.tk("stack" if isinstance(e, A.MStack) else "repeat")
            parts = [e.arg] + ([e.count] if e.count is not None else [])
            self.seq("(", parts, self._morph_or_count, ")", trailing=False, sp=False)
        elif isinstance(e, A.MScan):
            self.tk("scan")
            parts = [e.arg] + ([e.init] if e.init is not None else [])
            self.seq("(", parts, self._morph_or_init, ")", trailing=False, sp=False)
        else:  # pragma: no cover
            raise Mismatch(f"morphism expression {type(e).__name__}")

    def _morph_or_count(self, x) -> None:
        self.tk() if isinstance(x, int) else self.mexpr(x)

    def _morph_or_init(self, x) -> None:
        if isinstance(x, tuple):
            self.name(x[0])
            self.tk("=", sp=False, glue=True)
            self.name(x[1])
        else:
            self.mexpr(x)

    def call_arg(self, a) -> None:
        if isinstance(a, (A.Number, A.StringLit)):
            self.lit(a)
        else:
            self.mexpr(a)

    # ------------------------------------------------------------ let-expressions
    def expr(self, e) -> None:
        if isinstance(e, (A.Number, A.StringLit)):
            self.lit(e)
        elif isinstance(e, A.EName):
            self.name(e.name)
        elif isinstance(e, A.EBinOp):
            self.expr(e.left)
            self.tk(e.op)
            self.expr(e.right)
        elif isinstance(e, A.ENeg):
            self.tk("-", glue=True)
            self.expr(e.operand)
        elif isinstance(e, A.ENot):  # E9.10
            self.tk("not")
            self.expr(e.operand)
        elif isinstance(e, A.ECall):
            self.name(e.callee)
            self.seq("(", e.args, self.expr, ")", trailing=True, sp=False)
        elif isinstance(e, A.EMethod):
            self.name(e.receiver)
            self.tk(".", sp=False, glue=True)
            self.name(e.method)
            self.seq("(", e.args, self.expr, ")", trailing=True, sp=False)
        elif isinstance(e, A.EIndex):
            self.name(e.base)
            self.seq("[", e.indices, self.expr, "]", trailing=True, sp=False)
        elif isinstance(e, A.ESlice):  # E9: `a:b`, no spaces around the colon
            if e.start is not None:
                self.expr(e.start)
            self.tk(":", sp=e.start is None, glue=True)  # `X[2, :]`, `y[a:b]`
            if e.stop is not None:
                self.expr(e.stop)
        elif isinstance(e, A.EList):
            self.seq("[", e.items, self.expr, "]", trailing=True)
        elif isinstance(e, A.EParen):
            self.seq("(", [e.inner], self.expr, ")", trailing=False)
        elif isinstance(e, A.ELambda):
            if len(e.params) == 1:
                self.name(e.param)
            else:
                self.seq("(", e.params, self.name, ")", trailing=False)
            self.tk("->")
            self.expr(e.body)
        elif isinstance(e, A.EFactor):
            self.tk("factor")
            self.commas(e.binders, self._binder)
            self.tk("in")
            if isinstance(e.body, A.FactorCases):
                self.seq("{", e.body.cases, self._case, "}", trailing=True, pad=True)
            else:
                self.expr(e.body)
        else:  # pragma: no cover
            raise Mismatch(f"expression {type(e).__name__}")

    def _binder(self, b: A.FactorBinder) -> None:
        self.name(b.name)
        self.tk(":")
        self.type(b.type)

    def _case(self, c: A.FactorCase) -> None:
        self.tk()
        self.tk("->")
        self.expr(c.expr)

    # ------------------------------------------------------------ declarations
    def decl(self, d, level: int = 0) -> None:
        if isinstance(d, A.CompositionDecl):
            self.tk("composition")
            self.name(d.name)
            if d.level is not None:
                self.tk("as")
                self.name(d.level)
        elif isinstance(d, A.ObjectDecl):
            self.tk("object")
            self.name(d.name)
            self.tk(":")
            self.type(d.type)
            if d.options is not None:
                self.options(d.options)
        elif isinstance(d, A.MorphismDecl):
            self._signature("morphism", d)
            if d.init is not None:
                self.tk("~")
                self.mexpr(d.init.expr)
        elif isinstance(d, A.LetDecl):
            self.tk("let")
            self.name(d.name)
            self.tk("=")
            self.mexpr(d.expr)
            if d.where is not None:
                self.tk("where")
                self._open_block()
                for sub in d.where:
                    self.block_line(level + 1)
                    self.decl(sub, level + 1)
        elif isinstance(d, A.ExportDecl):
            self.tk("export")
            self.mexpr(d.expr)
        elif isinstance(d, A.ProgramDecl):
            self._signature("program", d)
            self._open_block()
            for s in d.body:
                self.block_line(level + 1)
                self.step(s, level + 1)
        elif isinstance(d, A.DeductionDecl):
            self._signature("deduction", d)
            self._open_block()
            for entry in d.entries:
                self.block_line(level + 1)
                self.ded_entry(entry, level + 1)
        else:  # pragma: no cover
            raise Mismatch(f"declaration {type(d).__name__}")

    def _signature(self, kw: str, d) -> None:
        self.tk(kw)
        self.name(d.name)
        params = getattr(d, "params", None)
        if params is not None:
            self.seq("(", params.items, self._param, ")", trailing=True, sp=False)
        self.tk(":")
        self.type(d.dom)
        self.tk("->")
        self.type(d.cod)
        if d.options is not None:
            self.options(d.options)

    def _open_block(self) -> None:
        """The header line is complete: no blank line before the block's first line."""
        self.w.no_blank = True

    def _param(self, p: A.Param) -> None:
        self.name(p.name)
        if p.kind is None:
            return
        self.tk(":")
        if p.kind.kind in ("Real", "FinSet"):
            self.tk(p.kind.kind)
        else:
            self.name(p.kind.name)
        if p.kind.kind == "mor":
            self.seq("[", [0, 1], self._mor_type, "]", trailing=False, sp=False)

    def _mor_type(self, _k) -> None:
        # `NAME[type, type]` (outside the core): the AST keeps no types, print tokens as written
        depth = 0
        while True:
            t = self.peek_text()
            if depth == 0 and t in (",", "]"):
                return
            depth += t in ("(",)
            depth -= t in (")",)
            self.tk(sp=t not in (")",) and self.w.last != "open")

    # ------------------------------------------------------------ program steps
    def step(self, s, level: int) -> None:
        if isinstance(s, (A.SampleStep, A.ObserveStep, A.MarginalizeStep)):
            self.tk({A.SampleStep: "sample", A.ObserveStep: "observe",
                     A.MarginalizeStep: "marginalize"}[type(s)])
            if isinstance(s.bind, A.TupleBind):
                self.seq("[", s.bind.names, self.name, "]", trailing=True)
            else:
                self.name(s.bind)
            if s.index is not None:
                self.tk(":")
                self.type(s.index)
            if getattr(s, "value", None) is not None:  # `observe v = e <- F` (E9.7)
                self.tk("=")
                self.expr(s.value)
            self.tk("<-")
            self.target(s.target)
            if s.options is not None:
                self.options(s.options)
            if isinstance(s, A.MarginalizeStep):
                self._open_block()
                for sub in s.body:
                    self.block_line(level + 1)
                    self.step(sub, level + 1)
        elif isinstance(s, (A.LetStep, A.ScoreStep)):
            self.tk("score" if isinstance(s, A.ScoreStep) else
                    "record" if s.recorded else "let")
            self.name(s.bind)
            if s.index is not None:  # E9.7 `score v : T = e`, E9.11 `let v : T = e`
                self.tk(":")
                self.type(s.index)
            self.tk("=")
            self.expr(s.rhs)
        elif isinstance(s, A.DataStep):
            self.tk("data")
            self.name(s.bind)
            self.tk(":")
            self.type(s.type)
        elif isinstance(s, A.ReturnStep):
            self.tk("return")
            if isinstance(s.value, A.TupleReturn):
                self.seq("(", s.value.items, self._return_item, ")", trailing=True)
            else:
                self.name(s.value)
        else:  # pragma: no cover
            raise Mismatch(f"step {type(s).__name__}")

    def _return_item(self, item) -> None:
        self.name(item[0])
        if item[1] is not None:
            self.tk(":")
            self.name(item[1])

    def target(self, t: A.Target) -> None:
        self.name(t.name)
        if t.args is not None:
            self.seq("(", t.args, self._draw_arg, ")", trailing=True, sp=False)

    def _draw_arg(self, a) -> None:
        if isinstance(a, A.DAIndex):
            self.name(a.base)
            self.seq("[", [a.index], self.name, "]", trailing=False, sp=False)
        elif isinstance(a, (A.Number, A.Name)):
            self.lit(a)
        else:  # E9.10: any let-expression
            self.expr(a)

    # ------------------------------------------------------------ deductions
    def ded_entry(self, e, level: int) -> None:
        if isinstance(e, (A.AtomsEntry, A.BindersEntry)):
            self.tk("atoms" if isinstance(e, A.AtomsEntry) else "binders")
            self.commas(e.names, self.name)
        elif isinstance(e, A.RuleEntry):
            self.tk("rule")
            self.name(e.name)
            self.tk(":")
            self.commas(e.premises, self.pattern)
            self.tk()  # the turnstile, `|-` or `⊢` as written
            self.pattern(e.conclusion)
            if e.pragma is not None:
                self.pragma(e.pragma)
        elif isinstance(e, A.LexiconBlock):
            self.tk("lexicon")
            self._open_block()
            for item in e.items:
                self.block_line(level + 1)
                self.lex_item(item)
        elif isinstance(e, A.LexiconFile):
            self.tk("lexicon")
            self.tk("from")
            self.lit(e.path)
            if e.options is not None:
                self.options(e.options)
        else:  # pragma: no cover
            raise Mismatch(f"deduction entry {type(e).__name__}")

    def lex_item(self, item: A.LexItem) -> None:
        self.lit(item.word)
        self.tk(":")
        cat = item.category
        if isinstance(cat, A.CatStar):
            self.tk("*")
        elif isinstance(cat, A.CatSet):
            self.seq("{", cat.names, self.name, "}", trailing=False, pad=True)
        else:
            self.pattern(cat)
        self.tk("=")
        self.expr(item.lf)
        if item.pragma is not None:
            self.pragma(item.pragma)

    def pattern(self, p: A.Pattern) -> None:
        self.name(p.head)
        if p.args is not None:
            self.seq("(", p.args, self.pattern, ")", trailing=False, sp=False)

