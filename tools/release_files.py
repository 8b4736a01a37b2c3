"""Where OpenAI's GPT-2 release files are found on this machine: $GPT2_MODELS_DIR, else models/ in the repository.

`python main.py` downloads them into models/<size>/; CI points GPT2_MODELS_DIR at a shared copy, and the tests
look there too (tests/conftest.py reads `models_dir` from here). The tools that write or run random-weight models
take OpenAI's tokenizer from 124M/ there: random weights still need a real tokenizer to turn ids into text.

    >>> tokenizer_folder()      # with GPT2_MODELS_DIR=/data/gpt2 and /data/gpt2/124M/{encoder.json,vocab.bpe}
    PosixPath('/data/gpt2/124M')

An empty GPT2_MODELS_DIR counts as unset (as an empty HF_HUB_CACHE does): `GPT2_MODELS_DIR=` is models/, never
the current folder. The tokenizer files are read as encoder.py reads them before a tool copies or uses them, so a
damaged encoder.json is one line here, not a model folder written with it.
"""

import os
from pathlib import Path

from encoder import get_encoder

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_FILES = ("encoder.json", "vocab.bpe")


def models_dir():
    """The folder that holds `124M/` with OpenAI's release files: $GPT2_MODELS_DIR (unless empty), else `models/`."""
    return Path(os.environ.get("GPT2_MODELS_DIR") or REPO_ROOT / "models")


def tokenizer_folder(folder=None):
    """folder (by default models_dir() / "124M") as a Path, or a ValueError saying how to get OpenAI's tokenizer
    files (encoder.json, vocab.bpe) if it lacks them, with a network or without one, or naming the file that does
    not read as a tokenizer file (encoder.get_encoder's checks: damaged, cut short, from another model)."""
    folder = Path(folder) if folder else models_dir() / "124M"
    missing = [name for name in TOKENIZER_FILES if not (folder / name).is_file()]
    if missing:  # offline, only a copy helps; with a network, the kit fetches just these (1.5 MB)
        raise ValueError(f"OpenAI's tokenizer files {' and '.join(missing)} are not in {folder}: copy encoder.json and "
                         f"vocab.bpe of OpenAI's 124M release into a folder DIR/124M and set GPT2_MODELS_DIR=DIR, or, "
                         f"where there is a network, `python classroom.py tokenizer` downloads them into models/124M")
    try:
        get_encoder(str(folder), "")  # the folder as it is (os.path.join("", folder))
    except ValueError as error:
        raise ValueError(f"{error} (or set GPT2_MODELS_DIR to a folder DIR whose DIR/124M holds good copies)") from None
    return folder
