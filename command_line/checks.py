"""Loading main.py's models, and what is checked once they are loaded: what a reader can skip.

Read main.py first. Its flags were checked before (command_line/flags.py); what needs the models is checked
here: that the two share a tokenizer, that the prompt and the tokens to write fit their context, and that no
weight is NaN or infinite. A download that cannot reach its server at all (no network) ends by saying what runs
without one: random weights of the same shapes (tools/random_models.py), the README's sample run.
"""

import tempfile
from pathlib import Path

import numpy as np

from command_line.flags import check_fits_context, tree_nodes, tree_text
from command_line.report import tokens
from loaders.download import DownloadError, could_not_connect
from loaders.weights import CheckpointError
from utils import check_same_tokenizer, download_and_load


def offline_hint():
    """What runs without a network: the README's sample run on random weights, in this system's temporary folder."""
    folder = Path(tempfile.gettempdir())
    return (f"Without a network, random weights of the same shapes run the demo: python tools/random_models.py, "
            f"then python main.py --draft_model_size {folder / 'random-124M'} --target_model_size "
            f"{folder / 'random-355M'} (random_models.py needs only OpenAI's tokenizer files, encoder.json and "
            f"vocab.bpe, 1.5 MB, in $GPT2_MODELS_DIR/124M or models/124M: copy them from anywhere that has them)")


def load_and_check(flags):
    """Download and load the models, check them, encode the prompt: (draft, target, prompt_ids).

    draft and target are (encoder, hparams, params); draft is None with --drafter lookup. Raises ValueError
    (bad input), DownloadError, or CheckpointError (a subclass of ValueError), each with a message that says
    what to do.
    """
    try:
        draft, target = download_and_load(
            flags.draft_model_size, flags.target_model_size, flags.models_dir, base_url=flags.base_url,
            retries=flags.download_retries, deadline_seconds=flags.download_deadline,
        )
    except DownloadError as error:
        if not could_not_connect(error):
            raise
        raise DownloadError(f"{error}. {offline_hint()}") from error
    prompt_ids = target[0].encode(flags.prompt)  # the target's tokenizer; check_models_fit makes sure they agree
    if not prompt_ids:
        raise ValueError("--prompt is empty: give some text to continue")
    check_models_fit(draft, target, prompt_ids, flags)
    for model, name, role in ((draft, flags.draft_model_size, "draft"), (target, flags.target_model_size, "target")):
        if model is not None:
            check_weights_finite(model, name, role)
    return draft, target, prompt_ids


def check_models_fit(draft, target, prompt_ids, flags):
    """ValueError unless the models share a tokenizer and prompt + N, K, the tree and n-grams fit the context.

    draft is None when the drafter needs no draft model; then only the target's context counts.
    """
    models = [target] if draft is None else [draft, target]
    if draft is not None:
        check_same_tokenizer(draft, target, (flags.draft_model_size, flags.target_model_size))
    n_ctx = min(hparams["n_ctx"] for _, hparams, _ in models)
    whose = "the target's context" if draft is None else "the models' context"
    if len(prompt_ids) + flags.n_tokens_to_generate > n_ctx:
        raise ValueError(
            f"the prompt ({tokens(len(prompt_ids))}) + --n_tokens_to_generate {flags.n_tokens_to_generate} = "
            f"{len(prompt_ids) + flags.n_tokens_to_generate} tokens is more than {whose} of {n_ctx}: "
            f"use a shorter prompt or generate fewer tokens"
        )
    check_fits_context(flags, n_ctx, whose)
    if flags.tree is not None and flags.n_tokens_to_generate > 0:
        # a round after L tokens sends the tree cut to min(depths, T - L - 1) depths (drafters.check_tree_fits);
        # L + its nodes is largest for the last round that still sends every depth (or the first round)
        T, depths = len(prompt_ids) + flags.n_tokens_to_generate, len(flags.tree)
        L = max(len(prompt_ids), T - 1 - depths)
        nodes = tree_nodes(flags.tree[: min(depths, T - L - 1)], n_ctx)
        if L + nodes > n_ctx:
            raise ValueError(
                f"--tree {tree_text(flags.tree)} sends {nodes} nodes in the round after {L} tokens (the prompt's "
                f"{len(prompt_ids)} and {L - len(prompt_ids)} new ones): {L + nodes} positions, more than {whose} of "
                f"{n_ctx}: use a smaller tree or generate fewer tokens"
            )


def damaged_weights(params, prefix=""):
    """The first weight tensor that holds NaN or infinite values, as 'name (n NaN, m infinite of size)', or None.

    params: picoGPT's nested dicts and lists of arrays. Such weights make every logit NaN, and greedy decoding
    of NaN logits writes token 0 ("!") forever, so they are reported instead of decoded.
    """
    if isinstance(params, dict):
        items = params.items()
    elif isinstance(params, (list, tuple)):
        items = enumerate(params)
    else:
        array = np.asarray(params)
        if np.isfinite(array.sum(dtype=np.float64)):  # NaN and inf survive a sum; float64 cannot overflow here
            return None
        n_nan, n_inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
        return f"{prefix} ({n_nan} NaN and {n_inf} infinite of {array.size} values)"
    for key, value in items:
        found = damaged_weights(value, f"{prefix}.{key}" if prefix else str(key))
        if found:
            return found
    return None


def check_weights_finite(model, name, role):
    """CheckpointError if a loaded model, (encoder, hparams, params), has NaN or infinite weights."""
    found = damaged_weights(model[2])
    if found:
        raise CheckpointError(f"the {role} {name} has NaN or infinite weights in {found}: the checkpoint is damaged; "
                              f"download or convert it again")
