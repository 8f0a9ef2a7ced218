"""What the checker knows of a pretrained causal language model (docs/extensions.md E10),
read from its folder without torch or transformers (the language server never imports
them).

`read_model(spelled, base_dir)` resolves the `model="…"` option of a
``role=pretrained`` morphism:

1. a folder: ``base_dir/spelled`` (the ``.qvr`` file's folder) first, then `spelled` as
   given (relative to the working folder, ``~`` expanded, or absolute);
2. else a model in the user's Hugging Face cache: ``HF_HUB_CACHE``, else
   ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``; the folder
   ``models--ORG--NAME/snapshots/REV`` of ``refs/main`` (else the newest snapshot).
   Nothing is ever downloaded.

and reads ``config.json`` (``model_type``, the layer count, ``vocab_size``) and the
tokenizer's vocabulary size (``tokenizer.json``: the ids of ``model.vocab`` and
``added_tokens``, the largest plus one; else ``vocab.json`` + ``added_tokens.json``;
a SentencePiece-only folder, ``tokenizer.model``, is sized by ``config.json``'s
``vocab_size``).  That size is what the token object must have: the ids the tokenizer
writes, which are the ids SMC draws (`qvr.smc.hf_lm`: output rows past the tokenizer's
vocabulary, padding of the embedding matrix, are never drawn).

Reads are cached per (folder, modification times of the files read), so an edit in the
editor costs a few `stat` calls.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

__all__ = ["ModelInfo", "read_model", "hub_cache", "DTYPES", "LAYER_KEYS"]

DTYPES = ("float32", "bfloat16")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_FILES = ("config.json", "tokenizer.json", "vocab.json", "added_tokens.json", "tokenizer.model")


@dataclass(frozen=True)
class ModelInfo:
    """The checker's view of a `model="…"` option (compares by value: the module
    checker replays it to decide whether a cached result still holds)."""

    spelled: str  # the option as written
    folder: Optional[str] = None  # the resolved folder (absolute), None when not found
    cached_name: Optional[str] = None  # the Hugging Face cache name (`gpt2`), if from there
    model_type: Optional[str] = None
    n_layers: Optional[int] = None
    vocab: Optional[int] = None  # the tokenizer's vocabulary size
    config_vocab: Optional[int] = None  # config.json's vocab_size (may be padded larger)
    error: Optional[str] = None  # None | "missing" | "not_lm"
    detail: str = ""  # what was tried / what is missing (for the messages)
    stamp: tuple = ()  # modification times of the files read

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        """``pretrained causal LM `tiny_lm` (gpt2, 2 layers), vocabulary 64 tokens``."""
        bits = [b for b in (self.model_type, None if self.n_layers is None else
                            f"{self.n_layers} layer{'s' if self.n_layers != 1 else ''}") if b]
        inner = f" ({', '.join(bits)})" if bits else ""
        return (f"pretrained causal LM `{self.spelled}`{inner}, vocabulary "
                f"{self.vocab} tokens")


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, by huggingface_hub's own rule: ``HF_HUB_CACHE``
    (or the older ``HUGGINGFACE_HUB_CACHE``), else ``HF_HOME/hub``, else
    ``XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        home = os.path.join(xdg, "huggingface")
    return Path(home).expanduser() / "hub"


def cached_snapshot(name: str) -> Optional[Path]:
    """The folder of model `name`'s snapshot in the hub cache (``refs/main``'s, else the
    newest one holding a ``config.json``), None when the cache has none.  The checker,
    completion and the dashboard's model field (`qvr_tui.lm_source`) read the cache
    through it."""
    snaps = hub_cache() / ("models--" + name.replace("/", "--")) / "snapshots"
    try:
        main = (snaps.parent / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        main = ""
    if main and (snaps / main).is_dir():
        return snaps / main
    try:
        found = [p for p in snaps.iterdir() if (p / "config.json").is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _cached_snapshot(name: str) -> tuple[Optional[Path], Path]:
    return cached_snapshot(name), hub_cache() / ("models--" + name.replace("/", "--"))


def _stamp(folder: Path) -> tuple:
    out = []
    for name in _FILES:
        try:
            out.append((name, os.stat(folder / name).st_mtime_ns))
        except OSError:
            out.append((name, None))
    return tuple(out)


_CACHE: dict = {}


def read_model(spelled: str, base_dir: Optional[str] = None) -> ModelInfo:
    """The `ModelInfo` of `model="spelled"` for a module in `base_dir` (see the module
    docstring); never raises."""
    tried = []
    folder, cached = None, None
    if spelled:
        given = Path(spelled).expanduser()
        candidates = []
        if base_dir and not given.is_absolute():
            candidates.append(Path(base_dir) / given)
        candidates.append(given)
        for c in candidates:
            tried.append(f"the folder {c}")
            if c.is_dir():
                folder = c.resolve()
                break
        if folder is None and not given.is_absolute() and not spelled.startswith(".") \
                and spelled.count("/") <= 1 and "\\" not in spelled:
            snap, repo = _cached_snapshot(spelled)
            tried.append(f"{repo.name} in the Hugging Face cache ({repo.parent})")
            if snap is not None:
                folder, cached = snap.resolve(), spelled
    if folder is None:
        return ModelInfo(spelled, error="missing", detail=", ".join(tried))
    stamp = _stamp(folder)
    key = (str(folder), stamp)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _read_folder(folder)
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = hit
    return ModelInfo(spelled, str(folder), cached, stamp=stamp, **hit)


def _json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _read_folder(folder: Path) -> dict:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        return dict(error="not_lm", detail=f"no config.json in {folder}")
    try:
        cfg = _json(cfg_path)
        if not isinstance(cfg, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return dict(error="not_lm", detail=f"{cfg_path} cannot be read: {exc}")
    text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    model_type = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None
    if model_type is None:
        return dict(error="not_lm", detail=f"{cfg_path} names no `model_type`")
    layers = next((v for k in LAYER_KEYS for v in (cfg.get(k), text_cfg.get(k))
                   if isinstance(v, int) and not isinstance(v, bool)), None)
    cv = cfg.get("vocab_size", text_cfg.get("vocab_size"))
    config_vocab = cv if isinstance(cv, int) and not isinstance(cv, bool) else None
    base = dict(model_type=model_type, n_layers=layers, config_vocab=config_vocab)
    try:
        vocab = _tokenizer_size(folder, config_vocab)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return dict(base, error="not_lm", detail=f"its tokenizer cannot be read: {exc}")
    if vocab is None:
        return dict(base, error="not_lm",
                    detail=f"no tokenizer in {folder} (tokenizer.json, vocab.json or "
                           f"tokenizer.model)")
    return dict(base, vocab=vocab)


def _tokenizer_size(folder: Path, config_vocab: Optional[int]) -> Optional[int]:
    ids: list[int] = []
    tj = folder / "tokenizer.json"
    if tj.is_file():
        data = _json(tj)
        model = data.get("model") or {}
        vocab = model.get("vocab")
        if isinstance(vocab, dict):
            ids += [int(i) for i in vocab.values()]
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids by position
            ids.append(len(vocab) - 1)
        ids += [int(t["id"]) for t in data.get("added_tokens") or ()]
        if not ids:
            raise ValueError(f"{tj} holds no vocabulary")
        return max(ids) + 1
    vj = folder / "vocab.json"
    if vj.is_file():
        ids += [int(i) for i in _json(vj).values()]
        aj = folder / "added_tokens.json"
        if aj.is_file():
            ids += [int(i) for i in _json(aj).values()]
        if not ids:
            raise ValueError(f"{vj} holds no vocabulary")
        return max(ids) + 1
    if (folder / "tokenizer.model").is_file() and config_vocab is not None:
        return config_vocab
    return None


#: at most this many folders are looked at for `model_choices` (a huge folder stays quick)
CHOICES_SCANNED = 500


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(
        (folder / f).is_file() for f in ("tokenizer.json", "vocab.json", "tokenizer.model"))


def model_choices(base_dir: Optional[str]) -> list[tuple[str, str]]:
    """``(spelling, where)`` of the models a ``model="…"`` option can name, for
    completion: the model folders beside the module (`base_dir`; a ``config.json`` and a
    tokenizer file), then the names in the Hugging Face cache (``org/name``); never
    reads a model's files beyond those two checks."""
    out: list[tuple[str, str]] = []
    if base_dir:
        try:
            entries = sorted(Path(base_dir).iterdir())[:CHOICES_SCANNED]
        except OSError:
            entries = []
        out += [(e.name, "model folder beside this file") for e in entries
                if not e.name.startswith(".") and e.is_dir() and _is_model_folder(e)]
    try:
        repos = sorted(hub_cache().glob("models--*"))[:CHOICES_SCANNED]
    except OSError:
        repos = []
    for repo in repos:
        name = repo.name.removeprefix("models--").replace("--", "/")
        snap, _ = _cached_snapshot(name)
        if snap is not None and _is_model_folder(snap):
            out.append((name, "in the Hugging Face cache"))
    return out


def base_dir_of(path: Optional[str]) -> Optional[str]:
    """The folder a module at `path` reads relative model folders from (None for a
    module that is not a file: ``<memory>``, ``<stdin>``)."""
    if not path or str(path).startswith(("<", "untitled:")) or "://" in str(path):
        return None
    return str(Path(path).expanduser().resolve().parent)
