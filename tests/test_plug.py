"""Speed plugs into the plain core from outside, and changes nothing but the time: the same logits to float32
rounding, the same greedy tokens, with `plain=True` (`python main.py --plain`) running gpt2.py alone.

Read speed/plug.py first. The models here are random GPT-2s with matrices of over 1 MB (n_embd 512), so that the
helper process on the second core really takes half of every product and half of the heads where it can run
(speed/second_core.MIN_BYTES): the equalities below are those of the machinery at work, not of a fallback.
Tolerance: the plugged products add the same terms in another order (panels, two processes), so logits of size
~1 agree to float32 rounding, a few 1e-6; 1e-4 leaves room for that and nothing else.
"""

import ast

import numpy as np
import pytest
from conftest import REPO_ROOT

import gpt2
import sampling
from loaders.random_weights import random_params
from model_fn import create_model_fn
from speed import plug, products

HPARAMS = {"n_vocab": 1024, "n_ctx": 96, "n_embd": 512, "n_head": 8, "n_layer": 2}
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def params():
    return random_params(HPARAMS, np.random.default_rng(0), std=0.05)


def test_a_plugged_pass_gives_the_plain_passs_logits_and_cache(params):
    """A prompt of 20 tokens, then a 5-token verification pass, then one token: each plugged pass's logits and
    keys and values equal the plain core's to float32 rounding."""
    weights, cache = plug.fast(params, HPARAMS["n_head"], HPARAMS["n_ctx"])
    plain_cache = gpt2.empty_cache(params["blocks"], HPARAMS["n_head"], HPARAMS["n_ctx"])
    rng = np.random.default_rng(1)
    for n_new in (20, 5, 1):
        ids = rng.integers(0, HPARAMS["n_vocab"], n_new).tolist()
        fast_logits, cache = gpt2.gpt2(ids, **weights, n_head=HPARAMS["n_head"], past=cache)
        plain_logits, plain_cache = gpt2.gpt2(ids, **params, n_head=HPARAMS["n_head"], past=plain_cache)
        assert fast_logits.dtype == np.float32 and fast_logits.shape == plain_logits.shape
        assert np.abs(fast_logits - plain_logits).max() <= TOLERANCE
        assert np.abs(cache.kv - plain_cache.kv).max() <= TOLERANCE


def test_every_weight_matrix_of_a_plugged_pass_goes_through_the_measured_routes(params, monkeypatch):
    """2 blocks x 4 matrices + the LM head = 9 products through products.matmul in one pass, and 2 attentions
    through products.share_heads; the plain core makes none (its teeth: counting works)."""
    calls = {"matmul": 0, "share_heads": 0}

    def counted(name, function):
        def wrapper(*args):
            calls[name] += 1
            return function(*args)
        return wrapper

    monkeypatch.setattr(products, "matmul", counted("matmul", products.matmul))
    monkeypatch.setattr(products, "share_heads", counted("share_heads", products.share_heads))
    weights, cache = plug.fast(params, HPARAMS["n_head"], HPARAMS["n_ctx"])
    gpt2.gpt2([1, 2, 3], **params, n_head=HPARAMS["n_head"])
    assert calls == {"matmul": 0, "share_heads": 0}
    gpt2.gpt2([1, 2, 3], **weights, n_head=HPARAMS["n_head"], past=cache)
    assert calls["share_heads"] == 2 and calls["matmul"] == 9 + 2  # and each attention's scores, routed too


@pytest.mark.parametrize("K", [1, 4])
def test_plain_and_plugged_model_functions_write_the_same_greedy_tokens(params, K):
    """Autoregressive and speculative sampling (a draft of the same weights at temperature 0.7 against a greedy
    target, so guesses are rejected and rolled back) write the same tokens through both model functions."""
    prompt, N = [5, 17, 300, 42], 24
    runs = []
    for plain in (True, False):
        target = create_model_fn(params, HPARAMS, temperature=0, plain=plain)
        draft = create_model_fn(params, HPARAMS, temperature=0.7, plain=plain)
        runs.append((sampling.autoregressive_sampling(prompt, target, N, np.random.default_rng(0)),
                     sampling.speculative_sampling(prompt, draft, create_model_fn(params, HPARAMS, temperature=0,
                                                                                   plain=plain),
                                                   N, K, np.random.default_rng(0))))
    assert runs[0] == runs[1]
    assert runs[0][0] == runs[0][1]  # greedy: speculative sampling writes the target's own text


def test_a_matrix_is_an_array_for_everything_but_its_product():
    """Matrix(w): the same shape, dtype, rows and transpose as w, and np.asarray gives w back; x @ Matrix(w) is
    x @ w (a small matrix: products.matmul multiplies it here)."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    matrix = plug.Matrix(w)
    assert matrix.shape == (3, 4) and matrix.dtype == np.float32 and np.asarray(matrix) is w
    assert np.array_equal(matrix[[2, 0]], w[[2, 0]]) and matrix.T.shape == (4, 3)
    x = np.ones((2, 3), dtype=np.float32)
    assert np.array_equal(x @ matrix, x @ w) and np.array_equal(np.ones((2, 4), np.float32) @ matrix.T,
                                                                  np.ones((2, 4), np.float32) @ w.T)


def docstring_lines(tree):
    """How many lines of a parsed file are docstrings (the module's, every class's and function's)."""
    nodes = [node for node in ast.walk(tree) if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))]
    return sum(node.body[0].end_lineno - node.body[0].lineno + 1 for node in nodes if ast.get_docstring(node))


def test_gpt2_py_is_at_most_a_quarter_docstring():
    """The model reads as code: of its lines, at most a quarter are docstrings (the math is in the code)."""
    source = (REPO_ROOT / "gpt2.py").read_text(encoding="utf-8")
    n_doc, n_lines = docstring_lines(ast.parse(source)), len(source.splitlines())
    assert n_doc <= n_lines / 4, f"gpt2.py: {n_doc} of {n_lines} lines are docstrings, more than a quarter"


def test_the_docstring_count_sees_every_docstring():
    """Its teeth: a module, a class and a function docstring of 1, 2 and 3 lines count 6."""
    source = '"""one"""\nclass A:\n    """two\n    lines"""\n\ndef f():\n    """three\n    more\n    lines"""\n'
    assert docstring_lines(ast.parse(source)) == 6
