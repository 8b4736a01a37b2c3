"""Make the Hugging Face reference fixtures that tests/test_gpt2.py and tests/test_hf_folder.py read.

Our gpt2.py is checked against a real, independent implementation of the same network: Hugging Face
`transformers.GPT2LMHeadModel` running in PyTorch. This script needs torch and transformers, which the
project itself never uses, so it runs once in a throwaway virtual environment and commits its small outputs:

    python3 -m venv /tmp/venv-hf
    /tmp/venv-hf/bin/pip install torch==2.13.0 transformers numpy
    cd <repository root> && /tmp/venv-hf/bin/python tests/make_hf_fixture.py          # every fixture
    cd <repository root> && /tmp/venv-hf/bin/python tests/make_hf_fixture.py trees    # only hf_gpt2_trees.npz

(torch is pinned: 2.13.0 is a CPU wheel; an unpinned torch pulls gigabytes of GPU libraries.) It was run with
torch 2.13.0, transformers 5.23.0, numpy 2.4.6. Rerunning it rewrites the same files; the numbers may change in
the last float32 bit with another torch version, far inside the tests' tolerances.

What it does, for each model shape in MODELS:

1. Builds a GPT2LMHeadModel with random weights from a fixed torch seed, in float32 and eval mode, with
   dropout probabilities set to 0 and `attn_implementation="eager"` (the plain softmax(q k^T / sqrt(d)) v).
2. Overwrites EVERY parameter with random values at a scale where the logits are O(1). Hugging Face
   initialises biases to 0 and layer norms to g=1, b=0: an implementation that forgot a bias or a layer norm's
   gain would still match those. Random biases and gains make every term visible in the logits.
3. Converts the state dict to OpenAI's layout (see notes/CONTRACTS.md). HF's GPT-2 uses `Conv1D` layers whose
   weights are already stored [n_in, n_out], like OpenAI's checkpoint, so nothing is transposed:

       transformer.wte.weight              -> wte                        [n_vocab, n_embd]
       transformer.wpe.weight              -> wpe                        [n_ctx, n_embd]
       transformer.h.{i}.ln_1.weight/bias  -> blocks.{i}.ln_1.g/b        [n_embd]
       transformer.h.{i}.attn.c_attn.*     -> blocks.{i}.attn.c_attn.w/b [n_embd, 3*n_embd] / [3*n_embd]
       transformer.h.{i}.attn.c_proj.*     -> blocks.{i}.attn.c_proj.w/b [n_embd, n_embd] / [n_embd]
       transformer.h.{i}.ln_2.weight/bias  -> blocks.{i}.ln_2.g/b        [n_embd]
       transformer.h.{i}.mlp.c_fc.*        -> blocks.{i}.mlp.c_fc.w/b    [n_embd, 4*n_embd] / [4*n_embd]
       transformer.h.{i}.mlp.c_proj.*      -> blocks.{i}.mlp.c_proj.w/b  [4*n_embd, n_embd] / [n_embd]
       transformer.ln_f.weight/bias        -> ln_f.g/b                   [n_embd]
       lm_head.weight                      -> (tied: the same tensor as wte, not stored)

4. Runs a few input id sequences (one of them the full n_ctx long) through the model and saves

       tests/fixtures/hf_gpt2_<name>.npz with the keys
         hparams.n_vocab, hparams.n_ctx, hparams.n_embd, hparams.n_head, hparams.n_layer   (int64 scalars)
         wte, wpe, ln_f.g, ln_f.b, blocks.0.ln_1.g, ..., blocks.{n_layer-1}.mlp.c_proj.b  (float32 params)
         inputs.{k}     int64 [T_k]            the k-th input sequence
         hf_logits.{k}  float32 [T_k, n_vocab] GPT2LMHeadModel(inputs.k).logits
         hf_present.{k} float32 [n_layer, 2, n_head, T_k, head_dim]  its KV cache (past_key_values) in
                        gpt2.py's layout: per layer, the keys then the values

5. For token trees (gpt2's `parents`, tests/test_gpt2.py), one more model, TREE_MODEL, and a few trees with
   several roots and depths up to 5 hung after a prefix (TREES). HF has no trees: each node's path is run as
   a plain sequence, prefix + tokens root .. node, and the last row of its logits is kept:

       tests/fixtures/hf_gpt2_trees.npz with the keys
         hparams.*, the params                          as above
         prefix.{k}   int64 [n_prefix_k]            the tokens before the tree (may be empty)
         nodes.{k}    int64 [m_k]                   the tree's tokens, parents first
         parents.{k}  int64 [m_k]                   parents[i]: index of node i's parent, -1 for a root
         hf_rows.{k}  float32 [m_k, n_vocab]        GPT2LMHeadModel(prefix + path to node i).logits[-1]

6. Saves two of the models as Hugging Face folders (config.json + model.safetensors), for hf_folder.load_hf_gpt2:

       tests/fixtures/hf_folder_<name>/  from GPT2LMHeadModel.save_pretrained: keys "transformer.h.0...."
       tests/fixtures/hf_folder_<name>/  from its base GPT2Model.save_pretrained: keys "h.0....", like the
           hub's openai-community/gpt2 files. Those hub files also hold each layer's causal-mask buffer
           "h.{i}.attn.bias" [1, 1, n_ctx, n_ctx] (saved when the mask was a persistent buffer; it is why the
           hub's 124M model.safetensors is 548 MB, not 498 MB), so this script adds those keys too: a loader
           must ignore them.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

from conftest import path_to  # tests/ is on the path when this script runs

FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"

# name -> hparams (OpenAI's names). Shapes are small so every fixture stays well under 1 MB.
MODELS = {
    "tiny": dict(n_vocab=61, n_ctx=32, n_embd=32, n_head=4, n_layer=2),
    "three_heads": dict(n_vocab=97, n_ctx=64, n_embd=48, n_head=3, n_layer=3),
    "eight_heads": dict(n_vocab=53, n_ctx=24, n_embd=32, n_head=8, n_layer=2),
    "one_head": dict(n_vocab=41, n_ctx=16, n_embd=16, n_head=1, n_layer=1),
}
# name of the model -> which class's save_pretrained writes its folder
FOLDERS = {"tiny": "GPT2LMHeadModel", "eight_heads": "GPT2Model"}

# The model and trees of hf_gpt2_trees.npz: (prefix length, parents). Several roots; depths up to 5.
TREE_MODEL = dict(n_vocab=67, n_ctx=24, n_embd=32, n_head=4, n_layer=2)
TREES = [
    (5, [-1, -1, 0, 0, 1, 1, 2, 3, 4, 5]),  # branching (2, 2, 1): 10 nodes, depth 3
    (3, [-1, -1, 0, 2, 3, 1, -1, 5, 4, 3]),  # ragged: 3 roots, a path of 5 nodes (0, 2, 3, 4, 8)
    (1, [-1, -1, -1]),  # three roots
    (4, [-1, 0, 1, 2]),  # a chain of 4
    (0, [-1, -1, 0, 1, 2]),  # no prefix: two roots at position 0
]
TREE_SEED = 4321

SEED = 1234


def make_config(hparams):
    """A GPT2Config with OpenAI's hparams, no dropout, eager attention, and GPT-2's defaults for the rest."""
    config = GPT2Config(
        vocab_size=hparams["n_vocab"],
        n_positions=hparams["n_ctx"],
        n_embd=hparams["n_embd"],
        n_layer=hparams["n_layer"],
        n_head=hparams["n_head"],
        activation_function="gelu_new",  # GPT-2's tanh approximation of GELU
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=hparams["n_vocab"] - 1,  # GPT-2's <|endoftext|> is its last id; 50256 is out of range here
        eos_token_id=hparams["n_vocab"] - 1,
    )
    config._attn_implementation = "eager"
    return config


@torch.no_grad()
def randomize_parameters(model, n_embd):
    """Overwrite every parameter so that logits are O(1) and no bias or layer-norm term is trivial.

    Weights ~ N(0, 1/n_in) keep each layer's output O(1); embeddings ~ N(0, 1.5^2/n_embd) give logits with a
    standard deviation around 1.5; biases ~ N(0, 0.2^2); layer-norm gains ~ 1 + N(0, 0.2^2), shifts ~ N(0, 0.2^2).
    """
    for name, p in model.named_parameters():
        if name.endswith(("wte.weight", "wpe.weight")):
            p.copy_(torch.randn_like(p) * (1.5 / n_embd**0.5))
        elif ".ln_" in name and name.endswith(".weight"):
            p.copy_(1.0 + 0.2 * torch.randn_like(p))
        elif name.endswith(".bias"):
            p.copy_(0.2 * torch.randn_like(p))
        elif name.endswith(".weight"):  # a Conv1D weight [n_in, n_out]
            p.copy_(torch.randn_like(p) / p.shape[0] ** 0.5)
        else:
            raise ValueError(f"unexpected parameter {name}")


def to_openai_params(state_dict, n_layer):
    """GPT2LMHeadModel's state dict -> flattened OpenAI-layout params {"blocks.0.attn.c_attn.w": array, ...}."""
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in state_dict.items()}
    params = {"wte": sd["transformer.wte.weight"], "wpe": sd["transformer.wpe.weight"]}
    for i in range(n_layer):
        hf = f"transformer.h.{i}."
        ours = f"blocks.{i}."
        for layer in ("ln_1", "ln_2"):
            params[ours + layer + ".g"] = sd[hf + layer + ".weight"]
            params[ours + layer + ".b"] = sd[hf + layer + ".bias"]
        for layer in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            params[ours + layer + ".w"] = sd[hf + layer + ".weight"]  # Conv1D: already [n_in, n_out]
            params[ours + layer + ".b"] = sd[hf + layer + ".bias"]
    params["ln_f.g"] = sd["transformer.ln_f.weight"]
    params["ln_f.b"] = sd["transformer.ln_f.bias"]
    # The output projection is tied to the token embedding: check, so a silently untied head can't slip in.
    if not np.array_equal(sd.get("lm_head.weight", params["wte"]), params["wte"]):
        raise ValueError("lm_head.weight is not tied to transformer.wte.weight")
    return params


def make_inputs(hparams, generator):
    """A one-token input, a short one, and a full-length one holding both the smallest and largest ids."""
    n_vocab, n_ctx = hparams["n_vocab"], hparams["n_ctx"]
    short = torch.randint(0, n_vocab, (7,), generator=generator)
    full = torch.randint(0, n_vocab, (n_ctx,), generator=generator)
    full[3], full[-2] = 0, n_vocab - 1
    one = torch.randint(0, n_vocab, (1,), generator=generator)
    return [one, short, full]


def save_folder(model, name, kind, hparams):
    """save_pretrained the model (or its base GPT2Model) into tests/fixtures/hf_folder_<name>/."""
    folder = FIXTURES_DIR / f"hf_folder_{name}"
    if folder.exists():
        shutil.rmtree(folder)
    if kind == "GPT2LMHeadModel":
        model.save_pretrained(folder, safe_serialization=True)
    elif kind == "GPT2Model":
        model.transformer.save_pretrained(folder, safe_serialization=True)
        # Add the hub's causal-mask buffers (see the module docstring).
        path = folder / "model.safetensors"
        tensors = load_file(path)
        n_ctx = hparams["n_ctx"]
        mask = np.tril(np.ones((n_ctx, n_ctx), dtype=np.float32)).reshape(1, 1, n_ctx, n_ctx)
        for i in range(hparams["n_layer"]):
            tensors[f"h.{i}.attn.bias"] = mask
        save_file(tensors, path, metadata={"format": "pt"})
    else:
        raise ValueError(kind)
    keys = sorted(load_file(folder / "model.safetensors"))
    files = sorted(p.name for p in folder.iterdir())
    print(f"  {folder.name}: {len(keys)} tensors, e.g. {keys[:2]}, files {files}")
    config = json.loads((folder / "config.json").read_text())
    for ours, theirs in [("n_vocab", "vocab_size"), ("n_ctx", "n_positions"), ("n_embd", "n_embd"),
                         ("n_head", "n_head"), ("n_layer", "n_layer")]:
        if config[theirs] != hparams[ours]:
            raise ValueError(f"{folder}/config.json: {theirs}={config[theirs]}, expected {hparams[ours]}")


def make_tree_fixture():
    """hf_gpt2_trees.npz: TREE_MODEL's weights, TREES with random tokens, and HF's row for every node."""
    torch.manual_seed(TREE_SEED)
    generator = torch.Generator().manual_seed(TREE_SEED)
    hparams = TREE_MODEL
    model = GPT2LMHeadModel(make_config(hparams)).float().eval()
    randomize_parameters(model, hparams["n_embd"])
    arrays = {f"hparams.{k}": np.int64(v) for k, v in hparams.items()}
    arrays.update(to_openai_params(model.state_dict(), hparams["n_layer"]))
    for k, (n_prefix, parents) in enumerate(TREES):
        prefix = torch.randint(0, hparams["n_vocab"], (n_prefix,), generator=generator).tolist()
        nodes = torch.randint(0, hparams["n_vocab"], (len(parents),), generator=generator).tolist()
        rows = []
        for i in range(len(nodes)):
            ids = torch.tensor(prefix + [nodes[j] for j in path_to(parents, i)])
            with torch.no_grad():
                rows.append(model(ids[None, :]).logits[0, -1].numpy())  # [n_vocab]
        arrays[f"prefix.{k}"] = np.array(prefix, dtype=np.int64)
        arrays[f"nodes.{k}"] = np.array(nodes, dtype=np.int64)
        arrays[f"parents.{k}"] = np.array(parents, dtype=np.int64)
        arrays[f"hf_rows.{k}"] = np.stack(rows).astype(np.float32)  # [m, n_vocab]
        print(f"trees {k}: prefix {n_prefix}, {len(nodes)} nodes, parents {parents}")
    path = FIXTURES_DIR / "hf_gpt2_trees.npz"
    np.savez(path, **arrays)
    print(f"  {path.name}: {path.stat().st_size / 1024:.0f} KiB")


def main(only=None):
    """Write every fixture; `only="trees"` writes hf_gpt2_trees.npz alone (the others stay byte for byte)."""
    FIXTURES_DIR.mkdir(exist_ok=True)
    make_tree_fixture()
    if only == "trees":
        return
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    for name, hparams in MODELS.items():
        model = GPT2LMHeadModel(make_config(hparams)).float().eval()
        randomize_parameters(model, hparams["n_embd"])
        params = to_openai_params(model.state_dict(), hparams["n_layer"])

        arrays = {f"hparams.{k}": np.int64(v) for k, v in hparams.items()}
        arrays.update(params)
        for k, ids in enumerate(make_inputs(hparams, generator)):
            with torch.no_grad():
                output = model(ids[None, :], use_cache=True)
            logits = output.logits[0].numpy()  # [T, n_vocab]
            # HF's cache: per layer keys and values [batch=1, n_head, T, head_dim] -> ours, stacked
            present = np.stack([
                np.stack([layer.keys[0].numpy(), layer.values[0].numpy()])
                for layer in output.past_key_values.layers
            ])  # [n_layer, 2, n_head, T, head_dim]
            if logits.dtype != np.float32 or present.dtype != np.float32:
                raise ValueError(f"expected float32 outputs, got {logits.dtype} and {present.dtype}")
            arrays[f"inputs.{k}"] = ids.numpy().astype(np.int64)
            arrays[f"hf_logits.{k}"] = logits
            arrays[f"hf_present.{k}"] = present
            print(f"{name} input {k}: T={len(ids)}, logits std {logits.std():.2f}, max {np.abs(logits).max():.2f}")

        path = FIXTURES_DIR / f"hf_gpt2_{name}.npz"
        np.savez(path, **arrays)
        print(f"  {path.name}: {path.stat().st_size / 1024:.0f} KiB")
        if name in FOLDERS:
            save_folder(model, name, FOLDERS[name], hparams)

    total = sum(p.stat().st_size for p in FIXTURES_DIR.rglob("*") if p.is_file() and "hf_" in str(p))
    print(f"total size of the hf_* fixtures: {total / 1024:.0f} KiB")


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:])
