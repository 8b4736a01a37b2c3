"""tools/benchmark_text.py on a tiny model, in seconds: the target writes the text, every row reproduces it, and

Read drafters.py's PromptLookup and tools/benchmark_text.py first: these tests are its specification.

the table and its JSON say what was measured (no timing is asserted: only that times were taken)."""

import json

import numpy as np
import pytest

from tools import benchmark_text
from model_fn import create_model_fn
from gpt2 import random_params
from sampling import autoregressive_sampling

TINY = {"n_vocab": 50257, "n_ctx": 128, "n_embd": 8, "n_head": 2, "n_layer": 1}


def test_the_text_target_pays_a_real_pass_but_writes_the_text():
    """Greedy decoding of a text target is the text, whatever the random model would have said; each call is
    one pass of the model underneath (its statistics count it)."""
    model = create_model_fn(random_params(TINY, np.random.default_rng(0)), TINY, temperature=0)
    text = [464, 3797, 3332, 319, 262, 2603, 13, 464, 3797]
    target = benchmark_text.text_target(model, text)
    assert autoregressive_sampling(text[:3], target, 6, np.random.default_rng(0)) == text
    assert model.stats.calls == 6
    rows = target(text[:4] + [0, 0], 3)  # after text[:4], and after two tokens that left the text
    assert rows.shape == (3, 50257) and rows.sum() == 3 and rows[0].argmax() == text[4]


def test_a_run_on_a_tiny_model_fills_every_row_and_the_table(tmp_path):
    """Two texts cut to 40 tokens each side, one repeat, K = 4 and auto, and the original lookup for comparison.
    Every run wrote the text (timed_run checks it, or the run stops), so each row decoded 40 tokens; K=4 rounds
    never propose more than 4; the rewrite's output copies its prompt, so lookup keeps guesses there."""
    results, info = benchmark_text.run(["rewrite", "prose"], [4, "auto"], size="tiny", repeats=1, hparams=TINY,
                                       max_tokens=40, calibrate_repeats=1, progress=lambda line: None)
    assert list(results) == ["rewrite", "prose"] and info["texts"]["rewrite"] == [40, 40]
    rows = results["rewrite"]
    assert list(rows) == ["autoregressive", "lookup, K=4", "lookup, K=auto", "lookup (max_ngram=3), K=auto"]
    assert rows["autoregressive"][0].target_passes == 40
    assert max(rows["lookup, K=4"][0].ks) == 4 and sum(rows["lookup, K=4"][0].kept) > 0
    assert all(run.prefill > 0 and run.decode > 0 for runs in rows.values() for run in runs)
    table = benchmark_text.markdown_table(json.loads(json.dumps(benchmark_text.to_json(results, info))))
    assert table.count("\n| rewrite |") == 4 and table.count("\n| prose |") == 4
    assert "alpha by match 1, 2-3, 4-7, 8-15, 16+" in table and "x (" in table and "by the cost model" in table


def test_the_modelled_speedup_is_the_tokens_over_the_rounds_costs():
    """Three rounds that proposed 0, 3 and 16 tokens cost r(1) + r(4) + r(17) = 1 + 2 + 3 (the table's last entry
    serving beyond it): 12 tokens in 6 steps is 2x."""
    assert benchmark_text.modelled_speedup(12, [0, 3, 16], [1.0, 1.5, 1.8, 2.0, 3.0]) == 2.0


def test_an_unknown_text_names_the_ones_there_are():
    with pytest.raises(ValueError, match="no text called 'poem'.*code, excerpts, prose, quotes, rewrite"):
        benchmark_text.read_texts(["poem"], list)
