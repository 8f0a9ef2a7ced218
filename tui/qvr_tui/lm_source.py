"""The pretrained language model a Setup field names (SMC ``--lm``), checked without
torch or transformers: the UI process only looks at files.

`lm_error(text)` is None when `text` is

* a folder (relative to the working folder, as the worker reads it) holding a model's
  ``config.json`` and a tokenizer file (`TOKENIZER_FILES`, what ``save_pretrained``
  writes for the common tokenizers), or
* a model name (``gpt2``, ``HuggingFaceTB/SmolLM-135M``) whose snapshot is in the
  Hugging Face cache (`qvr.sema.pretrained.cached_snapshot`, huggingface_hub's
  rule for the folder; the revision ``refs/main`` names, else the newest snapshot)
  with the same files;

else a short message, one line beside the field at 80 columns.  Nothing is downloaded or
loaded: the worker's `qvr.smc.hf_lm.load_lm` still judges what the files hold.

`lm_label(name)` is the short name the Live line and the Runs table show (a path from
``/``, ``~`` or ``.``, or with two slashes or more: its last part; else as given, which
reads the same for ``examples/tiny_lm`` and ``org/model``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from qvr.sema.pretrained import cached_snapshot  # the checker's reading of the hub cache

__all__ = ["lm_error", "lm_label", "TOKENIZER_FILES"]

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "spiece.model",
                   "vocab.txt", "sentencepiece.bpe.model")
_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _files_error(folder: Path) -> Optional[str]:
    if not (folder / "config.json").is_file():
        return "no config.json: not a model folder"
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        return "no tokenizer file (tokenizer.json, ...)"
    return None


def lm_error(text: str) -> Optional[str]:
    """Why `text` names no usable model (see the module docstring), or None."""
    text = text.strip()
    if not text:
        return None
    folder = Path(text).expanduser()
    if folder.is_dir():
        return _files_error(folder)
    if folder.exists():
        return "a file, not a model folder"
    snap = cached_snapshot(text) if _NAME.match(text) else None
    if snap is None:
        return "no such folder, nor a cached HF model"
    err = _files_error(snap)
    return err and "cached, but " + err.split(" (")[0].split(":")[0]


def lm_label(name: Optional[str]) -> str:
    """A short name of the model (see the module docstring)."""
    if not name:
        return ""
    name = str(name).rstrip("/")
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        return Path(name).name or name
    return name
