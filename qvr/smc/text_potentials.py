"""Constraints on the *text* of SMC particles: potentials that read the detokenised
continuation rather than token ids (qvr-runtime.md §8.4; the constraint kinds of Lew et
al. 2023, arXiv:2306.03081, §2.2 and §5: banned words and letters, a word-length budget,
a required word early on, infilling a template).

Why text: a pretrained tokenizer spells one word in pieces, and in more than one way
(``▁teacher`` may be ``▁te|ach|er`` or ``▁teach|er``; GPT-2 has ``dog`` and ``Ġdog``).
A word constraint on token ids would miss the other spellings, so these potentials
decode every child (``decode(ids) -> str``, e.g. `HFCausalLM.decode`) and judge its
words: maximal runs of letters, digits and ``_`` (``\\w+``) or of other non-space
characters (``.``).  The particle's string is the continuation after the prompt; the
prompt is never judged.

A word is *complete* once text follows it (a space, another word) or the string has
ended (its last token is `eos`, which is not decoded).  Constraints on whole words
(`forbid_words`, `require_word`, `template`) judge complete words only, so a particle
holding ``do`` is not stopped by a ban on ``do`` while it may still become ``dog``;
letter constraints (`forbid_letters`, `word_budget`) judge the partial word too (letters
are never taken back).  Each potential is an indicator (`G ∈ {0, 1}`), so the steered
target is the model conditioned on the constraint, and `Ẑ` estimates its probability.

A string cut at the sampler's ``max_len`` without `eos` ends there too: give the
potentials the same ``max_len`` and they judge a child of that length as final (every
word complete, a requirement decided); without it (None) such a string is judged as it
stands, its last word partial.

This module does not know about models; `HFCausalLM.decode` is the usual `decode`.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from .potentials import Potential, Transitions

__all__ = ["forbid_words", "require_word", "forbid_letters", "word_budget", "template",
           "words_of", "token_table", "letter_counts", "token_lengths"]

_WORD = re.compile(r"\w+|[^\w\s]+")


def words_of(text: str, final: bool) -> tuple[list[str], str]:
    """``(complete words, partial last word)`` of `text` (`final`: every word complete).

    >>> words_of("the dog sa", False)
    (['the', 'dog'], 'sa')
    >>> words_of("the dog .", True)
    (['the', 'dog', '.'], '')
    """
    words = _WORD.findall(text)
    if final or not words or not text or text[-1].isspace():
        return words, ""
    # the last word is partial unless the text ends with something after it
    return words[:-1], words[-1]


class _TextIndicator(Potential):
    """`G = 0` where `violates(words, partial, final)` holds for a child's text."""

    def __init__(self, decode: Callable[[Sequence[int]], str], eos: Optional[int],
                 max_len: Optional[int] = None):
        self.decode, self.eos, self.max_len = decode, eos, max_len

    def violates(self, words: list[str], partial: str, final: bool) -> bool:
        raise NotImplementedError

    def _judge(self, child: Sequence[int]) -> bool:
        child = [int(a) for a in child]
        ends = bool(child) and self.eos is not None and child[-1] == self.eos
        final = ends or (self.max_len is not None and len(child) >= self.max_len)
        text = self.decode(child[:-1] if ends else child)
        words, partial = words_of(text, final)
        return self.violates(words, partial, final)

    def log_potential(self, parents, children, t):
        import torch
        return torch.from_numpy(np.array([-np.inf if self._judge(c) else 0.0
                                          for c in children]))

    def log_potential_batch(self, batch: Transitions):
        kids = batch.child_tokens
        return np.array([-np.inf if self._judge(row) else 0.0 for row in kids.tolist()])


def _with_max_len(p: "_TextIndicator", max_len: Optional[int]) -> "_TextIndicator":
    p.max_len = max_len
    return p


class _ForbidWords(_TextIndicator):
    def __init__(self, phrases, decode, eos, ignore_case):
        super().__init__(decode, eos)
        self.ignore_case = ignore_case
        fold = str.lower if ignore_case else (lambda s: s)
        self.phrases = [tuple(fold(w) for w in _WORD.findall(p)) for p in phrases]
        if any(not p for p in self.phrases):
            raise ValueError("a forbidden word must have at least one letter or sign")

    def violates(self, words, partial, final):
        if self.ignore_case:
            words = [w.lower() for w in words]
        for p in self.phrases:
            n = len(p)
            if any(tuple(words[i:i + n]) == p for i in range(len(words) - n + 1)):
                return True
        return False


def forbid_words(*phrases: str, decode, eos: Optional[int], ignore_case: bool = False,
                 max_len: Optional[int] = None) -> Potential:
    """`G = 0` when the text comes to contain one of `phrases` as whole words (a phrase of
    several words: those words in a row).

    >>> p = forbid_words("dog", decode=lambda ids: " ".join(["dog", "do", "cat"][i]
    ...                  for i in ids), eos=9)
    >>> p.log_potential([(), (), ()], [(1,), (1, 2), (0, 9)], 2).tolist()
    [0.0, 0.0, -inf]
    """
    return _with_max_len(_ForbidWords(phrases, decode, eos, ignore_case), max_len)


class _RequireWord(_TextIndicator):
    def __init__(self, word, within, decode, eos):
        super().__init__(decode, eos)
        if within < 1:
            raise ValueError(f"`within` must be at least 1, got {within}")
        self.word, self.within = word, int(within)

    def violates(self, words, partial, final):
        decided = final or len(words) >= self.within
        return decided and self.word not in words[:self.within]


def require_word(word: str, within: int, *, decode, eos: Optional[int],
                 max_len: Optional[int] = None) -> Potential:
    """`G = 0` unless `word` is among the first `within` words of the text (judged when
    `within` words are complete, or when the string ends earlier)."""
    return _with_max_len(_RequireWord(word, within, decode, eos), max_len)


class _ForbidLetters(_TextIndicator):
    def __init__(self, letters, decode, eos):
        super().__init__(decode, eos)
        self.letters = frozenset(letters.lower()) | frozenset(letters.upper())

    def violates(self, words, partial, final):
        return any(ch in self.letters for w in (*words, partial) for ch in w)


def forbid_letters(letters: str, *, decode, eos: Optional[int]) -> Potential:
    """`G = 0` when the text holds one of `letters` (either case): a lipogram."""
    return _ForbidLetters(letters, decode, eos)


class _WordBudget(_TextIndicator):
    def __init__(self, max_letters, decode, eos):
        super().__init__(decode, eos)
        self.max_letters = int(max_letters)

    def violates(self, words, partial, final):
        return any(len(w) > self.max_letters for w in (*words, partial))


def word_budget(max_letters: int, *, decode, eos: Optional[int]) -> Potential:
    """`G = 0` when a word of the text is longer than `max_letters` characters."""
    return _WordBudget(max_letters, decode, eos)


class _Template(_TextIndicator):
    def __init__(self, pattern, hole, decode, eos):
        super().__init__(decode, eos)
        self.slots = [None if w == hole else w for w in pattern.split()]

    def violates(self, words, partial, final):
        slots = self.slots
        if len(words) > len(slots) or (final and len(words) != len(slots)):
            return True
        if any(s is not None and w != s for w, s in zip(words, slots)):
            return True
        if partial:
            if len(words) >= len(slots):
                return True
            s = slots[len(words)]
            return s is not None and not s.startswith(partial)
        return False


def template(pattern: str, *, hole: str = "_", decode, eos: Optional[int],
             max_len: Optional[int] = None) -> Potential:
    """`G = 0` unless the text follows `pattern` word by word, each `hole` word free (one
    word), ending exactly where the pattern does: infilling ``"the _ chased a _ ."``
    (the pattern's words are separated by spaces, as `words_of` reads the text).

    >>> vocab = ["the", "dog", "chased", "a", "cat", "."]
    >>> p = template("the _ chased a _ .", decode=lambda ids: " ".join(vocab[i]
    ...              for i in ids), eos=9)
    >>> p.log_potential([(0,), (0,)], [(0, 1), (0, 2)], 2).tolist()
    [0.0, 0.0]
    >>> p.log_potential([(0, 1)], [(0, 1, 9)], 3).tolist()
    [-inf]
    """
    return _with_max_len(_Template(pattern, hole, decode, eos), max_len)


def text_constraints(decode, eos: Optional[int], *, forbid: Iterable[Sequence[str]] = (),
                     require: Iterable[tuple[str, int]] = (),
                     max_len: Optional[int] = None) -> list[Potential]:
    """The word potentials of ``--forbid WORD[,WORD...]`` (a phrase) and
    ``--require WORD@N``."""
    out: list[Potential] = []
    phrases = [" ".join(p) for p in forbid]
    if phrases:
        out.append(forbid_words(*phrases, decode=decode, eos=eos, max_len=max_len))
    for word, within in require:
        out.append(require_word(word, within, decode=decode, eos=eos, max_len=max_len))
    return out


# ---------------------------------------------------------------- numbers per token
# (a steering program's soft score steps, docs/extensions.md E10: `count_letters(next,
# "e")`, `token_length(next)`): a table over the vocabulary, read at the new token

class _TokenTable(Potential):
    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64).reshape(-1)

    def log_potential(self, parents, children, t):
        import torch
        return torch.from_numpy(self.values[[int(c[-1]) for c in children]])

    def log_potential_batch(self, batch: Transitions):
        return self.values[batch.tokens]


def token_table(values) -> Potential:
    """`log G = values[a]` for the new token `a` of each child (a number per token).

    >>> token_table([0.0, -1.0, -2.0]).log_potential([(), ()], [(2,), (0, 1)], 1).tolist()
    [-2.0, -1.0]
    """
    return _TokenTable(values)


def letter_counts(letters: str, texts: Sequence[str], eos: Optional[int]) -> np.ndarray:
    """How many of `letters` (either case) each token's text holds (`texts[i]`: token i's
    text; the end token, never decoded, holds none)."""
    chars = frozenset(letters.lower()) | frozenset(letters.upper())
    return _no_text_at_eos([sum(ch in chars for ch in t) for t in texts], eos)


def token_lengths(texts: Sequence[str], eos: Optional[int]) -> np.ndarray:
    """The number of characters of each token's text (the end token: 0)."""
    return _no_text_at_eos([len(t) for t in texts], eos)


def _no_text_at_eos(values, eos: Optional[int]) -> np.ndarray:
    """`values` per token as float64, the end token's 0 (it is never decoded)."""
    out = np.array(values, dtype=np.float64)
    if eos is not None and 0 <= eos < len(out):
        out[eos] = 0.0
    return out
