"""Write tests/fixtures/tf_ckpt/: a tiny GPT-2 checkpoint saved by real TensorFlow, the way OpenAI saved theirs.

The project reads TensorFlow checkpoints without TensorFlow (loaders/tf_checkpoint.py). To test that reader against the real
thing, this script (the only place TensorFlow is used) saves a tiny GPT-2 checkpoint with TensorFlow itself:
tf.compat.v1 variables under variable_scope "model" and a tf.compat.v1 Saver, as in openai/gpt-2, so the names
and shapes follow the release (`model/h0/attn/c_attn/w` is [1, n_embd, 3 * n_embd]).

It writes, into tests/fixtures/tf_ckpt/:
    checkpoint, model.ckpt.index, model.ckpt.data-00000-of-00001   the bundle, written by tf Saver
    hparams.json                                                    n_vocab 50, n_ctx 16, n_embd 8, n_head 2, n_layer 2
    expected.npz                                                    every variable's values, by checkpoint name
    list_variables.json                                             tf.train.list_variables(prefix), and TF's version
(the .meta graph file is not written: nothing reads it, and it would be the largest file by far).

Rerun (in a throwaway venv; TensorFlow is never a dependency of the project or its tests):
    python3 -m venv /tmp/venv-tf && /tmp/venv-tf/bin/pip install tensorflow-cpu numpy
    /tmp/venv-tf/bin/python tests/make_tf_checkpoint_fixture.py
"""

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

OUT_DIR = Path(__file__).resolve().parent / "fixtures" / "tf_ckpt"
HPARAMS = {"n_vocab": 50, "n_ctx": 16, "n_embd": 8, "n_head": 2, "n_layer": 2}
SEED = 1234


def variable_shapes(hparams):
    """{checkpoint name: shape} in the layout of OpenAI's release (the matrices keep their leading 1)."""
    n_embd = hparams["n_embd"]
    shapes = {"model/wte": [hparams["n_vocab"], n_embd], "model/wpe": [hparams["n_ctx"], n_embd]}
    for i in range(hparams["n_layer"]):
        block = f"model/h{i}"
        shapes[f"{block}/ln_1/g"] = [n_embd]
        shapes[f"{block}/ln_1/b"] = [n_embd]
        shapes[f"{block}/attn/c_attn/w"] = [1, n_embd, 3 * n_embd]
        shapes[f"{block}/attn/c_attn/b"] = [3 * n_embd]
        shapes[f"{block}/attn/c_proj/w"] = [1, n_embd, n_embd]
        shapes[f"{block}/attn/c_proj/b"] = [n_embd]
        shapes[f"{block}/ln_2/g"] = [n_embd]
        shapes[f"{block}/ln_2/b"] = [n_embd]
        shapes[f"{block}/mlp/c_fc/w"] = [1, n_embd, 4 * n_embd]
        shapes[f"{block}/mlp/c_fc/b"] = [4 * n_embd]
        shapes[f"{block}/mlp/c_proj/w"] = [1, 4 * n_embd, n_embd]
        shapes[f"{block}/mlp/c_proj/b"] = [n_embd]
    shapes["model/ln_f/g"] = [n_embd]
    shapes["model/ln_f/b"] = [n_embd]
    return shapes


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    values = {
        name: rng.standard_normal(shape).astype(np.float32) for name, shape in variable_shapes(HPARAMS).items()
    }

    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        for name, value in values.items():
            scope, _, leaf = name.rpartition("/")  # "model/h0/attn/c_attn", "w"
            with tf.compat.v1.variable_scope(scope):
                tf.compat.v1.get_variable(leaf, initializer=tf.constant(value))
        saver = tf.compat.v1.train.Saver(save_relative_paths=True)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(session, str(OUT_DIR / "model.ckpt"), write_meta_graph=False)

    (OUT_DIR / "hparams.json").write_text(json.dumps(HPARAMS, indent=2) + "\n")
    np.savez(OUT_DIR / "expected.npz", **values)
    listed = [[name, [int(d) for d in shape]] for name, shape in tf.train.list_variables(prefix)]
    lines = ",\n".join("    " + json.dumps(entry) for entry in listed)  # one variable per line
    (OUT_DIR / "list_variables.json").write_text(
        f'{{\n  "tensorflow_version": "{tf.__version__}",\n  "variables": [\n{lines}\n  ]\n}}\n'
    )
    print(f"wrote {prefix}.* and the expected values into {OUT_DIR}")


if __name__ == "__main__":
    main()
