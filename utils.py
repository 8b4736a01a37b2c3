"""Get GPT-2's weights onto disk and into NumPy arrays, without TensorFlow or PyTorch: picoGPT's entry point.

Read gpt2.py and encoder.py first (what the weights and the tokenizer are for). Two steps, one function each:

1. `resolve_model`: a model's name becomes a local folder, downloading what is missing. A size ("124M") is
   OpenAI's release files (loaders/download.py: HTTP into NAME.part, then a rename); a Hugging Face name ("gpt2",
   "owner/name") is a snapshot in the Hugging Face cache (loaders/hub.py: the names, the cache and the Hub).
2. `load_model`: a folder becomes (tokenizer, hyperparameters, parameters). OpenAI's TensorFlow checkpoint is
   read by loaders/tf_checkpoint.py, a Hugging Face folder (config.json + model.safetensors) by loaders/hf_folder.py; both
   build on loaders/weights.py, what every reader checks (hparams, names and shapes, tensors read into arrays).

`load_encoder_hparams_and_params` does both (picoGPT's name); `download_and_load` does both for main.py's two
models. The parameters always come out in the nested layout of OpenAI's checkpoint names (picoGPT's layout):
params["blocks"][i]["attn"]["c_attn"]["w"], all float32.
Read next: loaders/download.py and loaders/hub.py for where files come from, loaders/weights.py and its two readers for how bytes
become arrays.
"""

import re
from pathlib import Path

from loaders.download import MODEL_SIZES, DownloadError, download_deadline, download_gpt2_files
from encoder import get_encoder
from loaders.hf_folder import load_hf_gpt2, read_hf_hparams
from loaders.hub import HUB_MODELS, check_model_name, hub_repo_id, hub_snapshot, local_path_kind
from loaders.tf_checkpoint import load_gpt2_params_from_tf_ckpt
from speed import layouts as matrix_layouts
from speed import routes
from loaders.weights import (
    MAX_CONFIG_BYTES,
    CheckpointError,
    checkpoint_error,
    read_openai_hparams,
)


def openai_checkpoint_prefix(folder):
    """The checkpoint prefix named by the folder's `checkpoint` file (model_checkpoint_path: "model.ckpt").

    Only the file name is kept, so a folder that was moved still works and the name never leads out of the
    folder; "model.ckpt" if there is no such file or name.
    """
    checkpoint_file = Path(folder) / "checkpoint"
    text = ""
    if checkpoint_file.is_file():
        try:
            with open(checkpoint_file, "rb") as file:
                text = file.read(MAX_CONFIG_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise checkpoint_error(checkpoint_file, f"not a readable checkpoint file ({error})") from None
    match = re.search(r'^model_checkpoint_path: "(.*)"', text, flags=re.MULTILINE)
    name = Path(match.group(1)).name if match else ""
    return Path(folder) / (name if name not in ("", ".", "..") else "model.ckpt")


def resolve_model(name, models_dir="models", base_url=None, retries=3, deadline_seconds=None):
    """Step 1 of 2: the local folder that holds the model called `name`, downloading what is missing.

    The ONE place where a model's name is understood (check_model_name says, without any network, whether it
    will be):
    - an existing folder: itself (OpenAI's layout or a Hugging Face GPT-2 folder);
    - one of MODEL_SIZES ("124M", ...): OpenAI's release files in models_dir/SIZE, downloaded if missing
      (from base_url, default $GPT2_BASE_URL, else OpenAI's bucket);
    - a Hugging Face name or id ("gpt2", "distilgpt2", "openai-community/gpt2-medium", any "owner/name" of a
      GPT-2 repository): its snapshot in the Hugging Face cache, downloaded from the Hub if missing.
    Each file's download has an overall deadline: deadline_seconds, else $GPT2_DOWNLOAD_DEADLINE, else an hour
    (download.download_deadline). Raises ValueError for a bad name or setting, DownloadError for a download
    that failed, CheckpointError for a damaged file, each one line naming the file or URL.
    """
    check_model_name(name)
    if local_path_kind(name) == "folder":
        return Path(name)
    download_deadline(deadline_seconds)  # a bad deadline is bad input: say so before any request
    if name in MODEL_SIZES:
        folder = Path(models_dir) / name
        try:
            download_gpt2_files(name, folder, base_url=base_url, retries=retries, deadline_seconds=deadline_seconds)
        except DownloadError as error:
            hub_name = next(short for short, (_, size) in HUB_MODELS.items() if size == name)
            raise DownloadError(f"{error}. The same model is on the Hugging Face Hub as {hub_name!r}: try "
                                f"--target_model_size {hub_name} (or --draft_model_size {hub_name})") from None
        return folder
    try:
        return hub_snapshot(hub_repo_id(name), retries=retries, deadline_seconds=deadline_seconds)
    except DownloadError as error:  # "models/random-tiny-near", a folder not made yet, reads as an owner/name too
        if "/" not in name:
            raise
        raise DownloadError(f"there is no folder {name} (seen from {Path.cwd()}), so it was taken for a Hugging "
                            f"Face Hub name: {error}") from None


def load_model(folder):
    """Step 2 of 2: (encoder, hparams, params) from a folder in OpenAI's layout (hparams.json + model.ckpt.*) or
    a Hugging Face GPT-2 folder (config.json + model.safetensors), with the tokenizer files beside them
    (encoder.json + vocab.bpe, or vocab.json + merges.txt). Each weight matrix comes back stored by column or by
    row, as measured faster on this machine (speed/layouts.py: kept in the folder's routes.json by the run that
    measured them): same shapes and values, faster decoding.

    The tokenizer is checked against the model before any weight is read: its files must agree with each other
    (encoder.check_vocabulary) and give exactly n_vocab ids, one per row of the model's embedding."""
    folder = Path(folder)
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():  # first: a Hub snapshot
        hparams_path = folder / "config.json"  # reads these four files whatever else is in it
        hparams = read_hf_hparams(hparams_path)
    elif (folder / "hparams.json").is_file():
        hparams_path = folder / "hparams.json"
        hparams = read_openai_hparams(hparams_path)
    elif (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} has a config.json but no model.safetensors: this project reads GPT-2 "
                              f"weights in safetensors only (a pytorch_model.bin would need torch)")
    else:
        raise ValueError(
            f"{folder} holds neither OpenAI's GPT-2 files (hparams.json + model.ckpt.*) "
            f"nor a Hugging Face GPT-2 folder (config.json + model.safetensors)"
        )
    encoder = load_tokenizer(folder, hparams, hparams_path)
    layouts = matrix_layouts.for_model(routes.kept_layouts(folder), hparams)  # measured at the first model, once
    if hparams_path.name == "hparams.json":
        params = load_gpt2_params_from_tf_ckpt(openai_checkpoint_prefix(folder), hparams, layouts=layouts)
    else:
        _, params = load_hf_gpt2(folder, layouts=layouts)
    return encoder, hparams, params  # the readers put each matrix in its layout as they read it


def load_tokenizer(folder, hparams, hparams_path):
    """The folder's Encoder, if its files agree with each other and with the model's n_vocab; else a
    CheckpointError naming the files (a damaged tokenizer file is a damaged file, like damaged weights)."""
    try:
        encoder = get_encoder(folder.name, str(folder.parent))
    except ValueError as error:  # get_encoder's errors name the file and what is wrong with it
        raise CheckpointError(str(error)) from None
    if len(encoder.encoder) != hparams["n_vocab"]:
        raise CheckpointError(
            f"{folder}: the tokenizer has {len(encoder.encoder)} symbols but {hparams_path.name} says n_vocab="
            f"{hparams['n_vocab']}: they are not from the same model (every id must have a row in the embedding, "
            f"and every row an id)"
        )
    return encoder


def load_encoder_hparams_and_params(model_size, models_dir="models"):
    """(encoder, hparams, params) for a model name or folder: resolve_model, then load_model."""
    return load_model(resolve_model(model_size, models_dir))


def check_same_tokenizer(draft, target, names):
    """ValueError unless the two models, each (encoder, hparams, params), share one tokenizer."""
    (draft_encoder, draft_hparams, _), (target_encoder, target_hparams, _) = draft, target
    if draft_hparams["n_vocab"] != target_hparams["n_vocab"] or draft_encoder.encoder != target_encoder.encoder:
        raise ValueError(
            f"the draft {names[0]} (n_vocab {draft_hparams['n_vocab']}) and the target {names[1]} "
            f"(n_vocab {target_hparams['n_vocab']}) have different vocabularies: speculative sampling needs a "
            f"draft and a target that share one tokenizer"
        )


def download_and_load(draft_model_size, target_model_size, models_dir, **download_options):
    """Resolve both models to folders (downloading what is missing), then load both: (draft, target), each
    (encoder, hparams, params).

    Both are resolved before either is loaded, so a broken download shows before minutes of loading.
    download_options go to utils.resolve_model (base_url, retries, deadline_seconds). A draft_model_size of
    None (prompt lookup needs no draft model) is neither downloaded nor loaded: the draft returned is None.
    """
    folders = [None if name is None else resolve_model(name, models_dir, **download_options)
               for name in (draft_model_size, target_model_size)]
    kept = routes.kept_layouts(folders[1])  # the target's folder keeps the layouts with the routes (routes.settle)
    if kept is not None:
        matrix_layouts.take(kept)  # both models are read as the run that measured them read them
    if draft_model_size is None:
        print(f"loading the target {target_model_size} (no draft model) ...", flush=True)
        return None, load_model(folders[1])
    print(f"loading the draft {draft_model_size} and the target {target_model_size} ...", flush=True)
    return load_model(folders[0]), load_model(folders[1])
