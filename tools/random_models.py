"""Random-weight GPT-2 folders of the real shapes: the models of the README's sample run (a tool).

Read loaders/random_weights.py's `random_params` (the weights) and loaders/hf_folder.py (the Hugging Face folder the demo loads) first.

    python tools/random_models.py                          # writes random-124M and random-355M
    python tools/random_models.py --sizes 124M --folder gpt2  # writes gpt2/random-124M
    python tools/random_models.py --trace                  # writes random-tiny-near and random-tiny-target

The folders go into --folder, by default the system's temporary folder (tempfile.gettempdir(): /tmp on Linux);
the command prints each path it wrote. --trace writes the tiny models of the README's trace excerpt instead
(n_embd 8, the ones tests/test_main.py runs main.py on: a target, and a draft that is the target plus noise).

Each folder is a Hugging Face GPT-2 folder (config.json, model.safetensors) with OpenAI's tokenizer files
(encoder.json, vocab.bpe) copied in, so `python main.py --draft_model_size /tmp/random-124M` loads it like
any other. The weights come from np.random.default_rng(--seed), one generator for all the sizes in order, as
make_readme_figures.py's sample run draws them: with the default seed these are the sample run's models. The
tokenizer files are read from $GPT2_MODELS_DIR/124M, else models/124M: nothing is downloaded, so with the two
files at hand this runs offline (`python main.py`, where there is a network, downloads them into models/124M).
"""

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

# `python tools/random_models.py` puts tools/ first on the path: put the repository's root there too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.benchmark import hparams_of, model_name  # noqa: E402
from loaders.random_weights import check_memory_for, random_params  # noqa: E402
from loaders.messages import shown
from command_line.flags import MAX_SEED, as_whole_number, errors_as_one_line  # noqa: E402
from command_line.scripts import as_names, check_output_folder, run_script  # noqa: E402
from tools.model_files import write_hf_folder  # noqa: E402
from tools.release_files import tokenizer_folder  # noqa: E402

SAMPLE_RUN_SEED = 123  # the seed of the README's sample run (make_readme_figures.py: its seed 0 + 123)
SAMPLE_RUN_SIZES = "124M,355M"  # its models' sizes
TINY_HPARAMS = {"n_vocab": 50257, "n_ctx": 64, "n_embd": 8, "n_head": 2, "n_layer": 2}  # the trace run's shapes


def tiny_params(seed):
    """Random weights of TINY_HPARAMS' shapes from np.random.default_rng(seed): the trace run's target, and the
    tests' tiny models. std 0.5 rather than GPT-2's 0.02: logits far apart, so no float32 near-tie decides a
    greedy token."""
    return random_params(TINY_HPARAMS, np.random.default_rng(seed), std=0.5)


def near_params(params, rng, scale):
    """params plus scale * standard normal noise on every array (in the nested order): a draft that agrees with
    its target often but not always, so that a run shows kept guesses, rejections and bonus tokens."""
    if isinstance(params, dict):
        return {key: near_params(value, rng, scale) for key, value in params.items()}
    if isinstance(params, list):
        return [near_params(value, rng, scale) for value in params]
    return (params + scale * rng.standard_normal(params.shape)).astype(params.dtype)


def checked_folders(names, folder, tokenizer_dir=None):
    """(tokenizer folder, [folder/random-NAME for each name]), or a ValueError if the tokenizer files are missing
    or a folder exists already (a second run must not silently mix two models)."""
    tokenizer_dir = tokenizer_folder(tokenizer_dir)
    targets = [Path(folder) / f"random-{name}" for name in names]
    for target in targets:
        if target.exists():
            raise ValueError(f"{target} exists already: delete it, or write elsewhere with --folder")
    return tokenizer_dir, targets


def write_random_models(sizes, folder, seed=SAMPLE_RUN_SEED, tokenizer_dir=None):
    """[the folders written]: folder/random-NAME for each size (a released size, a Hugging Face name or a model
    folder, whose shapes are used), random weights from one np.random.default_rng(seed). Two equal names
    become random-NAME-draft and random-NAME-target."""
    names = [model_name(size) for size in sizes]
    if len(names) == 2 and names[0] == names[1]:
        names = [f"{names[0]}-draft", f"{names[1]}-target"]
    tokenizer_dir, targets = checked_folders(names, folder, tokenizer_dir)
    rng = np.random.default_rng(seed)
    for size, target in zip(sizes, targets):
        hparams = hparams_of(size)
        try:
            write_hf_folder(target, random_params(hparams, rng), hparams, tokenizer_dir)
        except OSError as error:  # a full disk, say: no half-written model is left to be loaded later
            shutil.rmtree(target, ignore_errors=True)
            raise OSError(error.errno, error.strerror, str(target)) from None
    return targets


def write_trace_models(folder, tokenizer_dir=None):
    """[folder/random-tiny-near, folder/random-tiny-target]: the README's trace run's models (the target
    tiny_params(seed=1); the draft it plus noise of scale 0.2, as tests/test_main.py's trace test makes it)."""
    tokenizer_dir, (near, target) = checked_folders(["tiny-near", "tiny-target"], folder, tokenizer_dir)
    params = tiny_params(seed=1)
    write_hf_folder(near, near_params(params, np.random.default_rng(5), 0.2), TINY_HPARAMS, tokenizer_dir)
    write_hf_folder(target, params, TINY_HPARAMS, tokenizer_dir)
    return [near, target]


def main(sizes=SAMPLE_RUN_SIZES, folder=None, seed=SAMPLE_RUN_SEED, trace=False):
    """Write folder/random-SIZE for each of the comma-separated sizes, or with --trace the trace run's two tiny
    models (see the module docstring).

    Args:
        sizes: the sizes, comma-separated: 124M, 355M, 774M, 1558M.
        folder: where the model folders go; by default the system's temporary folder.
        seed: the seed of the random weights.
        trace: write the trace run's two tiny models instead (always the same: no --seed, no --sizes).
    """
    with errors_as_one_line():  # a bad flag, a missing tokenizer or an existing folder: one line, exit code 2
        if not isinstance(trace, bool):
            raise ValueError(f"--trace takes no value (it is on or off); got --trace={shown(trace)}")
        if trace and (seed != SAMPLE_RUN_SEED or sizes != SAMPLE_RUN_SIZES):  # else silently not what was asked for
            raise ValueError("--trace writes the trace run's two tiny models, always the same ones (the README's "
                             "trace shows them): --seed and --sizes make the other models, without --trace")
        sizes = as_names(sizes, "--sizes")
        for size in sizes:  # one at a time: each model's weights are freed once its folder is written
            check_memory_for([(size, hparams_of(size))])
        folder = check_output_folder(tempfile.gettempdir() if folder is None else folder, "--folder")
        seed = as_whole_number(seed, "--seed", 0, MAX_SEED)
        paths = write_trace_models(folder) if trace else write_random_models(sizes, folder, seed)
    for path in paths:
        print(f"wrote {path}")


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/random_models.py")
