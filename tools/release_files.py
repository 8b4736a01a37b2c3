"""Where OpenAI's GPT-2 release files are found on this machine: $GPT2_MODELS_DIR, else models/ in the repository.

`python main.py` downloads them into models/<size>/; CI points GPT2_MODELS_DIR at a shared copy, and the tests
look there too (tests/conftest.py reads `models_dir` from here). The tools that write or run random-weight models
take OpenAI's tokenizer from 124M/ there: random weights still need a real tokenizer to turn ids into text.

    >>> tokenizer_folder()      # with GPT2_MODELS_DIR=/data/gpt2 and /data/gpt2/124M/{encoder.json,vocab.bpe}
    PosixPath('/data/gpt2/124M')
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_FILES = ("encoder.json", "vocab.bpe")


def models_dir():
    """The folder that holds `124M/` with OpenAI's release files: $GPT2_MODELS_DIR, else `models/`."""
    return Path(os.environ.get("GPT2_MODELS_DIR", REPO_ROOT / "models"))


def tokenizer_folder(folder=None):
    """folder (by default models_dir() / "124M") as a Path, or a ValueError saying how to get OpenAI's tokenizer
    files (encoder.json, vocab.bpe) if it lacks them, with a network or without one."""
    folder = Path(folder) if folder else models_dir() / "124M"
    missing = [name for name in TOKENIZER_FILES if not (folder / name).is_file()]
    if missing:  # offline, only a copy helps; with a network, the kit fetches just these (1.5 MB)
        raise ValueError(f"OpenAI's tokenizer files {' and '.join(missing)} are not in {folder}: copy encoder.json and "
                         f"vocab.bpe of OpenAI's 124M release into a folder DIR/124M and set GPT2_MODELS_DIR=DIR, or, "
                         f"where there is a network, `python classroom.py tokenizer` downloads them into models/124M")
    return folder
