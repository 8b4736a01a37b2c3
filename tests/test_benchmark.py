"""tools/benchmark.py: the cost model's formulas by hand, what the cost measurement times, and the tables end to end.

Read lookahead.py (the cost model) and tools/benchmark.py first: these tests are its specification.

The end-to-end runs use the tiny random models of tests/test_main.py (Hugging Face folders with the real
50257-token tokenizer). No test asserts a timing: the machine is shared and has 2 cores. What the tests
check is what does not depend on the clock: with a draft equal to the target, every guess is accepted, so
alpha and the target passes per round are known exactly, and the predictions printed beside them must follow
from the printed c and r by the formulas.
"""

import inspect
import re
import sys

import numpy as np
import pytest

from tools import benchmark, benchmark_forward
from tools.benchmark import pass_times
from lookahead import break_even_alpha, predicted_speedup, tokens_per_round
from loaders.random_weights import random_params
from records import SpeculativeStats
from model_fn import create_model_fn
from tools import compare_drafters
from conftest import REPO_ROOT
from test_main import TINY_HPARAMS, tiny_params, write_hf_folder

# ------------------------------------------------------------------------------------------------------------
# The formulas
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.step10
def test_tokens_per_round_is_the_geometric_sum_of_leviathans_equation_1():
    """1 + a + ... + a^K = (1 - a^(K+1)) / (1 - a); K + 1 at a = 1 (every guess kept); 1 at a = 0."""
    assert tokens_per_round(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)  # 3.3616
    assert tokens_per_round(0.7, 5) == pytest.approx((1 - 0.7**6) / (1 - 0.7))
    assert tokens_per_round(1.0, 3) == 4
    assert tokens_per_round(0.0, 3) == 1


@pytest.mark.step10
def test_predicted_speedup_is_tokens_per_round_over_the_cost_of_a_round():
    """alpha 0.8, K 4, c 0.4: Leviathan 3.3616 / (0.4 * 4 + 1) = 1.2929; with r 2.5: 3.3616 / 4.1 = 0.8199."""
    assert predicted_speedup(0.8, 4, c=0.4) == pytest.approx(3.3616 / 2.6)
    assert predicted_speedup(0.8, 4, c=0.4, r=2.5) == pytest.approx(3.3616 / 4.1)
    assert predicted_speedup(0.0, 1, c=0.0) == 1.0  # a free draft that is always wrong: one token per pass


@pytest.mark.step10
def test_break_even_alpha_solves_predicted_speedup_equal_to_one():
    """K 1, c 0.5: (1 + a) / 1.5 = 1 at a = 0.5. With r 1.5 a round costs 2 steps and writes at most 2 tokens:
    the speedup reaches 1 only at a = 1, so it never wins. K 2, c 0.1, r 1: 1 + a + a^2 = 1.2, a = 0.1708."""
    assert break_even_alpha(1, c=0.5) == pytest.approx(0.5, abs=1e-9)
    assert break_even_alpha(1, c=0.5, r=1.5) is None
    assert break_even_alpha(2, c=0.1) == pytest.approx((-1 + np.sqrt(1 + 4 * 0.2)) / 2, abs=1e-9)


# ------------------------------------------------------------------------------------------------------------
# What the cost measurement times
# ------------------------------------------------------------------------------------------------------------

SMALL = {"n_vocab": 20, "n_ctx": 32, "n_embd": 8, "n_head": 2, "n_layer": 1}


@pytest.mark.parametrize("n", [1, 4])
def test_a_timed_pass_with_the_cache_feeds_exactly_n_new_tokens(n):
    """pass_times makes one untimed call (all 10 tokens cached) and 3 timed ones that feed n tokens each."""
    model = create_model_fn(random_params(SMALL, np.random.default_rng(0)), SMALL, kv_cache=True)
    (seconds,) = pass_times([(model, list(range(10)), n)], repeats=3)
    assert seconds > 0
    assert (model.stats.calls, model.stats.positions) == (4, 10 + 3 * n)


def test_a_timed_pass_without_the_cache_recomputes_the_whole_sequence():
    model = create_model_fn(random_params(SMALL, np.random.default_rng(0)), SMALL, kv_cache=False)
    pass_times([(model, list(range(10)), 4)], repeats=3)
    assert (model.stats.calls, model.stats.positions) == (4, 4 * 10)


# ------------------------------------------------------------------------------------------------------------
# End to end on tiny models
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_dir(tmp_path, release_124M_dir):
    return write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)


def table_rows(out, n_columns):
    """The rows of a printed table that start with K: lists of strings."""
    return [line.split() for line in out.splitlines() if re.match(r"^\s*\d+\s+\S", line)
            and len(line.split()) >= n_columns]


@pytest.mark.parametrize("kv_cache", [True, False])
def test_a_draft_equal_to_the_target_gives_alpha_1_and_k_plus_1_tokens_per_target_pass(
        tmp_path, tiny_dir, capsys, kv_cache):
    """Draft = target, temperature 0: every guess is kept, alpha = 1.00.

    Each of the 2 prompts gets N = 8 tokens in ceil(8 / (K + 1)) rounds: K = 1: 4 rounds, 2.00x fewer target
    passes; K = 2: 3 rounds (3 + 3 + 2 tokens), 2.67x; K = 3: 2 rounds, 4.00x. At alpha = 1 the predictions
    are (K + 1) / (c K + 1) and (K + 1) / (c K + r), from the printed c and r. Those are rounded to 3 decimals
    (|error| <= 0.0005 each), which moves (K + 1) / (c K + r) by at most (K + 1)(K + 1) 0.0005 / (c K + r)^2
    <= 16 * 0.0005 = 0.008 for K <= 3 and c K + r >= 1, and the printed prediction is rounded to 2 decimals
    (0.005 more): within 0.02. (With c rounded to 2 decimals, K = 3 could be off by 0.06: a flaky test.)
    """
    benchmark.main(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1, 2, 3),
                   prompts=["Alan Turing theorized that", "The capital of France is"], n_tokens_to_generate=8,
                   repeats=2, kv_cache=kv_cache, img_dir=str(tmp_path / "img"))
    out = capsys.readouterr().out
    rows = {int(row[0]): row for row in table_rows(out, 9)}
    assert sorted(rows) == [1, 2, 3]
    for K, passes_speedup in [(1, "2.00x"), (2, "2.67x"), (3, "4.00x")]:
        _, alpha, _, speedup_passes, c, r, _, predicted, predicted_r = rows[K]
        assert alpha == "1.00" and speedup_passes == passes_speedup
        assert float(predicted[:-1]) == pytest.approx((K + 1) / (float(c) * K + 1), abs=0.02)
        assert float(predicted_r[:-1]) == pytest.approx((K + 1) / (float(c) * K + float(r)), abs=0.02)
    assert "every speculative text is the autoregressive (greedy) one: yes" in out
    assert "2 prompt(s) x 8 tokens" in out and ("KV cache on" if kv_cache else "KV cache off") in out


def test_random_weights_print_costs_and_predictions_for_each_alpha_in_both_cache_settings(tmp_path, tiny_dir, capsys):
    """With random weights the table has no measured alpha: it predicts the speedup for each of --alphas.

    Each row's predictions must follow from its printed c and r: alpha 0.5, K: (1 - 0.5^(K+1)) / 0.5 / (cK + 1).
    The sampler columns are filled for the cache setting that ran (--kv_cache) and "-" for the other one.
    """
    benchmark.main(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1, 2), alphas=(0.5, 0.9),
                   n_tokens_to_generate=6, repeats=2, random_weights=True, img_dir=str(tmp_path / "img"))
    out = capsys.readouterr().out
    assert "RANDOM weights (acceptance is meaningless: cost figures only)" in out
    with_cache, without_cache = out.split("with the KV cache:")[1].split("without a cache")
    for section, sampler_ran in ((with_cache, True), (without_cache, False)):
        rows = table_rows(section, 12)
        assert [int(row[0]) for row in rows] == [1, 2]
        for row in rows:
            K, c, r, spec_ms, round_over_step = int(row[0]), float(row[1]), float(row[2]), row[3], row[4]
            assert (spec_ms != "-") == sampler_ran and (round_over_step != "-") == sampler_ran
            numbers = [cell for cell in row[5:] if cell != "|"]  # cK+r, 2 x Leviathan, 2 x with r, break-even
            assert float(numbers[0]) == pytest.approx(c * K + r, abs=0.02)
            for alpha, leviathan, with_r in zip((0.5, 0.9), numbers[1:3], numbers[3:5]):
                assert float(leviathan) == pytest.approx(predicted_speedup(alpha, K, c), abs=0.02)
                assert float(with_r) == pytest.approx(predicted_speedup(alpha, K, c, r), abs=0.02)


def test_the_plots_are_small_pngs_in_img_dir(tmp_path, tiny_dir, capsys):
    """With matplotlib (requirements/plots.txt) a random-weights run writes its two figures, each < 200 KB."""
    pytest.importorskip("matplotlib")
    benchmark.main(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1, 2),
                   n_tokens_to_generate=4, repeats=1, random_weights=True, img_dir=str(tmp_path / "img"))
    paths = sorted((tmp_path / "img").iterdir())
    assert [p.name for p in paths] == ["ms_per_token_random_tiny_tiny_cache.png", "predicted_speedup_random_tiny_tiny.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size < 200_000



def test_a_run_not_told_where_to_plot_plots_into_a_folder_of_its_own_not_the_readmes_img(tmp_path, tiny_dir, capsys,
                                                                                         monkeypatch):
    """img/ holds the README's figures, remade with the README's text by the figures command alone: a learner's
    own run (EXERCISES.md's step 10 runs tools/benchmark.py) plots into plots/, which git ignores, and so does
    tools/benchmark_forward.py (they wrote into img/, and `git status` showed the README's figures changed)."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    benchmark.main(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1,),
                   n_tokens_to_generate=4, repeats=1, random_weights=True)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["ms_per_token_random_tiny_tiny_cache.png",
                                                                      "predicted_speedup_random_tiny_tiny.png"]
    assert not (tmp_path / "img").exists()
    assert inspect.signature(benchmark_forward.main).parameters["img_dir"].default == "plots"
    assert "plots/" in (REPO_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()

def test_without_matplotlib_the_run_says_how_to_install_it_and_writes_no_plots(tmp_path, tiny_dir, capsys,
                                                                                monkeypatch):
    """matplotlib is an optional extra: `import matplotlib` failing must cost the plots, nothing else."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    benchmark.main(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1,),
                   n_tokens_to_generate=4, repeats=1, random_weights=True, img_dir=str(tmp_path / "img"))
    out = capsys.readouterr().out
    assert "matplotlib is not installed" in out and "pip install -r requirements/plots.txt" in out
    assert "RANDOM weights" in out
    assert not (tmp_path / "img").exists()


@pytest.mark.parametrize(
    "flags, expected",
    [
        (dict(Ks=(1, 0)), "--Ks takes whole numbers >= 1, comma-separated; got 0"),
        (dict(alphas="x"), "--alphas must be a number; got 'x'"),
        (dict(random_weights=True, target_model_size="7B"), "'7B' is neither one of 124M, 355M, 774M, 1558M"),
        (dict(target_model_size="7B"), "--target_model_size: unknown model"),
        (dict(top_p=0), "--top_p must be a number in (0, 1]"),
    ],
)
def test_a_bad_flag_gets_one_error_line_and_exit_code_2(tmp_path, capsys, flags, expected):
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(models_dir=str(tmp_path / "models"), **flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("random_weights", [True, False])
def test_prompts_and_n_longer_than_the_context_get_one_error_line(tmp_path, tiny_dir, capsys, random_weights):
    """The tiny models have n_ctx 64: 100 new tokens after any prompt do not fit, with real or random weights."""
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), n_tokens_to_generate=100,
                       random_weights=random_weights, img_dir=str(tmp_path / "img"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is more than the models' context of 64 tokens" in err


@pytest.mark.parametrize("flags", [["--prompts", "Hello, world"], ["--prompts=Hello, world"]])
def test_a_prompt_with_a_comma_stays_one_prompt_as_in_main_py(tmp_path, tiny_dir, flags):
    """fire reads "Hello, world" as the two prompts "Hello" and "world"; main.py and compare_llama_cpp keep it
    one, and so does tools/benchmark.py now (a list is still '["one", "two"]')."""
    import subprocess

    from conftest import REPO_ROOT

    assert benchmark.prompts_kept_whole(["--prompts", '["a, b", "c"]']) == ["--prompts", '["a, b", "c"]']
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools/benchmark.py"), *flags, "--draft_model_size",
                          str(tiny_dir), "--target_model_size", str(tiny_dir), "--Ks", "1", "--n_tokens_to_generate",
                          "2", "--repeats", "1", "--img_dir", str(tmp_path / "img")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "temperature 0.0, 1 prompt(s) x 2 tokens per run" in run.stdout, run.stderr[-2000:]


# ------------------------------------------------------------------------------------------------------------
# Drafters and trees
# ------------------------------------------------------------------------------------------------------------


def test_a_tree_has_the_nodes_of_its_branching_products():
    """(2, 2, 1, 1): 2 at depth 1, 2 * 2 at depth 2, 4 * 1 at depths 3 and 4: 14; a chain (1,) * K has K."""
    assert compare_drafters.tree_nodes((2, 2, 1, 1)) == 14
    assert compare_drafters.tree_nodes((2, 1, 1)) == 6
    assert compare_drafters.tree_nodes((1,) * 7) == 7


def test_the_prediction_for_a_run_of_fixed_chains_is_the_classic_formula():
    """Every round proposed K = 4 and the draft model ran 4 times per round: the prediction is
    tokens_per_round(alpha, 4) / (4c + r(4)), the formula of the classic table, whatever the number of rounds."""
    costs = benchmark.Costs(True, 32, draft_step=0.02, target_step=0.05, target_pass={4: 0.15})
    run = compare_drafters.DrafterRun(stats=SpeculativeStats(), draft_calls=3 * 4, proposal_sizes=[4, 4, 4])
    run.stats.checked, run.stats.accepted = 10, 7
    assert compare_drafters.predicted_run_speedup(run, costs) == pytest.approx(predicted_speedup(0.7, 4, c=0.4, r=3.0))


def test_the_prediction_for_lookup_counts_only_target_passes_and_plain_steps_cost_one():
    """Lookup runs no model (0 draft calls). Rounds that proposed 3, 0 and 1 tokens at alpha 0.5 write
    1.875 + 1 + 1.5 tokens on average and cost r(3) + 1 + r(1) target steps."""
    costs = benchmark.Costs(True, 32, draft_step=0.02, target_step=0.05, target_pass={1: 0.1, 3: 0.125})
    run = compare_drafters.DrafterRun(stats=SpeculativeStats(), draft_calls=0, proposal_sizes=[3, 0, 1])
    run.stats.checked, run.stats.accepted = 4, 2
    assert compare_drafters.predicted_run_speedup(run, costs) == pytest.approx((1.875 + 1 + 1.5) / (2.5 + 1 + 2))
    run.proposal_sizes = [5]  # r(6) was not measured: no prediction rather than a guess
    assert compare_drafters.predicted_run_speedup(run, costs) is None


def test_the_drafter_table_has_a_row_per_cache_setting_prompt_group_drafter_and_k(tmp_path, tiny_dir):
    """Draft = target at temperature 0: the model drafter's checked guesses are all kept (alpha 1.00), in both
    cache settings and on both prompt groups; every row has a measured and a predicted speedup."""
    results = benchmark.run(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1,),
                            prompts=["The capital of France is"], n_tokens_to_generate=6, repeats=1,
                            img_dir=str(tmp_path / "img"), drafters="model,lookup,staged", drafter_Ks=(2, "auto", "hf"),
                            k_max=3, copy_prompts=["one two three, one two three, one two"],
                            free_prompts=["Alan Turing theorized that"])
    header, *rows = results["drafter_rows"]
    assert header[:4] == ["cache", "prompts", "drafter", "K"]
    keys = [tuple(row[:4]) for row in rows]
    assert sorted(keys) == sorted((cache, group, name, K) for cache in ("on", "off") for group in ("copying", "free")
                                  for name in ("model", "lookup", "staged") for K in ("2", "auto", "hf"))
    for row in rows:
        cells = dict(zip(header, row))
        if cells["drafter"] in ("model", "staged"):
            assert cells["alpha"] in ("1.00", "n/a")
        assert cells["speedup (measured)"].endswith("x") and cells["speedup (predicted)"] != ""


def test_with_random_weights_lookups_alpha_is_labelled_meaningless_and_trees_meet_chains_of_as_many_nodes(
        tmp_path, tiny_dir, capsys):
    """Tree (2, 1) has 4 nodes: it runs beside the chain K = 4. The rows column counts what each pass really sent
    (the proposal and the last token): at temperature 0 the draft's rows are one-hot, so the tree is its greedy
    chain of 2 (at most 3 rows a pass) while the chain sends up to 5 (fewer in a last round cut to the tokens
    left). The column once printed the shape's nodes + 1, 5 for both."""
    results = benchmark.run(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1,),
                            n_tokens_to_generate=6, repeats=1, random_weights=True, img_dir=str(tmp_path / "img"),
                            drafters="lookup", drafter_Ks=(2,), trees="2,1", k_max=4)
    for row in results["drafter_rows"][1:]:
        assert row[4] == "n/a" or row[4].endswith("(meaningless)")
    assert "lookup's alpha is meaningless" in capsys.readouterr().out
    header, *rows = results["tree_rows"]
    shapes = {(row[0], row[1], row[2]): row for row in rows}
    for cache in ("on", "off"):
        for group in ("copying", "free"):
            tree, chain = float(shapes[cache, group, "tree 2,1"][3]), float(shapes[cache, group, "chain K=4"][3])
            assert 1 < tree <= 3 < chain <= 5, (tree, chain)


@pytest.mark.parametrize(
    "flags, expected",
    [
        (dict(drafters="model,oracle"), "--drafters takes model, lookup and staged"),
        (dict(drafters="lookup", drafter_Ks=(2, "best")), 'every K in --drafter_Ks (or "auto", "hf")'),
        (dict(trees="2,0"), "--trees takes shapes like 2,1,1;2,2,1"),
        (dict(trees="2,x"), "--trees takes shapes like 2,1,1;2,2,1"),
        (dict(temperature=float("inf")), "--temperature must be a finite number >= 0"),  # fire reads 1e999 so
    ],
)
def test_a_bad_drafter_or_tree_flag_gets_one_error_line_and_exit_code_2(tmp_path, capsys, flags, expected):
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(random_weights=True, models_dir=str(tmp_path / "models"), **flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and len(err.strip().splitlines()) == 1


def test_a_prompt_too_long_for_the_context_is_named_with_its_flag(tiny_dir, capsys):
    """The drafter comparison adds its own prompts (--copy_prompts, long by default) to --prompts: where one of
    those does not fit the tiny models' context, the error names that flag, not --n_tokens_to_generate alone."""
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(draft_model_size=str(tiny_dir), target_model_size=str(tiny_dir), Ks=(1,), prompts="Hello",
                       n_tokens_to_generate=3, repeats=1, prefix_length=4, drafters="lookup")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "tokens of --copy_prompts, + --n_tokens_to_generate 3" in err, err
    assert "give --copy_prompts shorter prompts" in err


def test_a_tree_of_one_level_is_a_shape_however_fire_reads_it():
    """--trees 2 reaches benchmark.main as the int 2 (fire reads numbers), "2,1" as a tuple, "2,1;3" as text: each
    is a list of shapes (an int was iterated, a TypeError); a flag with no number is still refused in one line."""
    assert compare_drafters.parse_trees(2) == [(2,)] and compare_drafters.parse_trees("2") == [(2,)]
    assert compare_drafters.parse_trees((2, 1)) == [(2, 1)] and compare_drafters.parse_trees("2,1;3") == [(2, 1), (3,)]
    with pytest.raises(ValueError, match="--trees takes shapes like"):
        compare_drafters.parse_trees(True)


def test_r_between_measured_lengths_is_interpolated_and_outside_them_refused():
    """r(K) for a (K + 1)-row pass: measured at K = 1 (2 rows, 0.10 s) and K = 3 (4 rows, 0.14 s) over a
    0.05 s step; K = 2 lies halfway: (0.10 + 0.14) / 2 / 0.05 = 2.4."""
    costs = benchmark.Costs(True, 32, draft_step=0.02, target_step=0.05, target_pass={1: 0.1, 3: 0.14})
    assert costs.r(2) == pytest.approx(2.4) and costs.r(3) == pytest.approx(2.8)
    assert costs.covers(2) and not costs.covers(4)
    with pytest.raises(KeyError):
        costs.r(4)
