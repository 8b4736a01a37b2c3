"""The README and EXERCISES.md say what the code does: their numbers are the scripts' output, their links land.

What a test can check about prose: that a block the README shows as a script's output is that output, that
the numbers a learner is told to recompute come out, that links to lines of code land on the code they name,
and that counts quoted in EXERCISES.md are the counts in the tests.
"""

import re
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "img"))
import worked_round  # noqa: E402  (img/ is not a package)

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
EXERCISES = (REPO_ROOT / "EXERCISES.md").read_text(encoding="utf-8")


def generated_block(text, name):
    """The text between `<!-- name: begin ... -->` and `<!-- name: end -->`, without a ```text fence."""
    match = re.search(rf"<!-- {name}: begin[^>]*-->\n(.*?)<!-- {name}: end -->", text, re.S)
    assert match, f"the README has no block marked {name}"
    return re.sub(r"^```\w*\n|```\n?$", "", match.group(1).strip() + "\n", flags=re.M).strip()


def test_the_worked_round_in_the_readme_is_what_img_worked_round_py_prints():
    assert generated_block(README, "worked-round") == worked_round.report(worked_round.worked_rounds())


def test_the_worked_round_follows_the_rules_it_illustrates():
    """Recomputed from the tables: beta = sum min(p, q), the residual (q - p)+ sums to 1 - beta, a guess is kept
    exactly when u < min(1, q/p), and a round writes its kept guesses plus one token (residual or bonus)."""
    rounds = worked_round.worked_rounds()
    assert [rnd["origins"] for rnd in rounds] == [["draft", "residual"], ["draft", "draft", "bonus"]]
    for rnd in rounds:
        for check in rnd["checks"]:
            assert check["kept"] == (check["u"] < min(1.0, check["q"] / check["p"]))
        residual = rnd["residual"]
        if residual is not None:
            p, q = residual["p"], residual["q"]
            assert residual["beta"] == pytest.approx(np.minimum(p, q).sum())
            assert residual["unnormalised"].sum() == pytest.approx(1 - residual["beta"])
            assert residual["normalised"] == pytest.approx(np.maximum(q - p, 0) / (1 - residual["beta"]))
    first = rounds[0]["residual"]
    assert first["beta"] == pytest.approx(0.5) and first["normalised"] == pytest.approx([0.8, 0.2, 0.0])


def test_the_worked_rounds_are_what_speculative_sampling_writes_with_the_same_seed():
    """img/worked_round.py spells the algorithm out instead of calling sampling.py, drawing its uniforms in the
    sampler's order (Step 1's draws, then one per check, then the residual's or the bonus token's). So the
    sampler, given the same tables, prompt, K and seed, must write the same tokens."""
    from sampling import speculative_sampling
    from test_speculative_exactness import markov_model

    rounds = worked_round.worked_rounds()
    written = [token for rnd in rounds for token in rnd["written"]]
    draft, target = markov_model(worked_round.DRAFT_TABLE), markov_model(worked_round.TARGET_TABLE)
    out = speculative_sampling(worked_round.PROMPT, draft, target, len(written), worked_round.K,
                               np.random.default_rng(worked_round.SEED))
    assert out[len(worked_round.PROMPT) :] == written


def test_the_worked_round_uses_the_exactness_tests_tables():
    try:
        from markov import DRAFT_TABLE, TARGET_TABLE
    except ImportError:
        from test_speculative_exactness import DRAFT_TABLE, TARGET_TABLE
    assert np.array_equal(worked_round.TARGET_TABLE, TARGET_TABLE)
    assert np.array_equal(worked_round.DRAFT_TABLE, DRAFT_TABLE)


def test_line_links_land_on_the_code_their_text_names():
    """A link like [`_accept`](sampling.py#L419) must point at a line holding `_accept`: line numbers go stale
    whenever a file above them changes, and a learner following a stale link reads the wrong function."""
    links = re.findall(r"\[`([^`]+)`[^\]]*\]\((\w+\.py)#L(\d+)\)", README)
    assert links, "expected line links into the code"
    for name, path, line in links:
        lines = (REPO_ROOT / path).read_text(encoding="utf-8").splitlines()
        assert int(line) <= len(lines) and name in lines[int(line) - 1], (
            f"{path}#L{line} should show {name!r}; it shows {lines[int(line) - 1] if int(line) <= len(lines) else 'nothing'!r}")


def test_the_glossary_defines_the_terms_the_issue_found_undefined():
    glossary = README.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    for term in ("α (alpha)", "KV cache", "memory-bound", "the floor", "OpenBLAS repacking", '"never"'):
        assert term in glossary, term


def test_exercises_quote_the_number_of_texts_the_tiktoken_comparison_runs():
    """Step 5 says how many texts the encoder is compared with tiktoken on: the size of test_encoder's CORPUS."""
    test_encoder = pytest.importorskip("test_encoder")
    assert f"on {len(test_encoder.CORPUS)} texts" in EXERCISES
    assert f"compared on {len(test_encoder.CORPUS)} cases" in README


# ------------------------------------------------------------------------------------------------------------
# The parts make_readme_figures.py writes: one command, one run, internally consistent
# ------------------------------------------------------------------------------------------------------------


def test_every_generated_part_names_the_one_command_that_wrote_it():
    commands = set(re.findall(r"<!-- [\w-]+: begin \(([^)]*)\) -->", README))
    assert commands == {"python make_readme_figures.py --random_weights"}, commands
    machine = generated_block(README, "machine")
    assert machine.startswith("Made by `python make_readme_figures.py --random_weights`") and "cores" in machine


def markdown_rows(block):
    """The cells of a markdown table's rows (header first, the --- line left out)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in block.splitlines()
            if line.startswith("|")]
    return [rows[0]] + [row for row in rows[1:] if not set("".join(row)) <= set("- ")]


def test_the_cost_tables_predictions_follow_from_its_own_c_and_r_at_one_alpha():
    """Each prediction is (1 - a^(K+1)) / ((1 - a)(cK + r)) of the c and r printed beside it (c to 3 digits,
    r to 2: a prediction moves by less than 0.02), at the ONE alpha the header names; each break-even alpha
    solves prediction = 1, and "never" means even alpha = 1 does not reach 1."""
    from benchmark import predicted_speedup

    header, *rows = markdown_rows(generated_block(README, "cost-table"))
    alphas = set(re.findall(r"α = ([\d.]+)", " ".join(header)))
    assert len(alphas) == 1, f"one alpha per table, got {alphas}"
    alpha = float(alphas.pop())
    assert rows
    for row in rows:
        K, groups = int(row[0]), [row[i : i + 4] for i in range(1, len(row), 4)]
        for c, r, predictions, even in groups:
            assert re.fullmatch(r"\d\.\d{3}", c), f"c to three digits, got {c}"
            c, r = float(c), float(r)
            leviathan, with_r = (float(v.strip(" ×")) for v in predictions.split("/"))
            assert leviathan == pytest.approx(predicted_speedup(alpha, K, c), abs=0.02)
            assert with_r == pytest.approx(predicted_speedup(alpha, K, c, r), abs=0.02)
            if even == "never":
                assert predicted_speedup(1.0, K, c, r) <= 1.02
            else:
                assert predicted_speedup(float(even), K, c, r) == pytest.approx(1, abs=0.03)


def test_the_sentences_that_read_the_cost_table_quote_its_numbers():
    """The summary's c and r ranges are the table's."""
    header, *rows = markdown_rows(generated_block(README, "cost-table"))
    summary = generated_block(README, "cost-summary")
    for group, label in ((0, "With the cache"), (1, "Without the cache")):
        cs = {row[1 + 4 * group] for row in rows}
        rs = sorted(float(row[2 + 4 * group]) for row in rows)
        span = f"{rs[0]:.2f}" if rs[0] == rs[-1] else f"{rs[0]:.2f}–{rs[-1]:.2f}"
        assert f"**{label}, r = {span}** and c = {cs.pop()}" in summary


def test_replace_block_rewrites_only_between_the_marks():
    from make_readme_figures import replace_block

    text = "intro\n<!-- t: begin (old) -->\nold\n<!-- t: end -->\noutro\n"
    assert replace_block(text, "t", "new\n", "cmd") == "intro\n<!-- t: begin (cmd) -->\nnew\n<!-- t: end -->\noutro\n"
    with pytest.raises(ValueError, match="no <!-- u: begin -->"):
        replace_block(text, "u", "new", "cmd")


def test_fix_line_links_moves_a_stale_link_to_its_code(tmp_path):
    from make_readme_figures import fix_line_links

    (tmp_path / "m.py").write_text("x = 1\n\ndef f():\n    pass\n\ndef g():\n    f()\n")
    text = "[`def f`](m.py#L1) and [`f()`](m.py#L7) and [`def g`, here](m.py#L2)"
    assert fix_line_links(text, tmp_path) == "[`def f`](m.py#L3) and [`f()`](m.py#L7) and [`def g`, here](m.py#L6)"
    with pytest.raises(ValueError, match="no line of m.py holds"):
        fix_line_links("[`def h`](m.py#L1)", tmp_path)


def test_the_exactness_table_shows_the_correct_sampler_under_its_bound_and_every_wrong_rule_over_its_own():
    header, *rows = markdown_rows(generated_block(README, "exactness-table"))
    assert rows[0][0].startswith("speculative") and all(row[0].startswith("wrong: ") for row in rows[1:])
    correct_tv = max(float(v) for v in rows[0][1].split("–"))
    assert correct_tv < float(rows[0][2])
    for rule, tv, bound in rows[1:]:
        assert float(tv) > float(bound), rule


def test_make_readme_figures_runs_end_to_end_on_tiny_models(tmp_path, release_124M_dir, capsys):
    """The one command, on tiny random models and without touching README.md (--dry_run): every part it
    writes is printed, and its cost table passes the checks the README's does."""
    from make_readme_figures import main
    from test_main import TINY_HPARAMS, tiny_params, write_hf_folder

    tiny = str(write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir))
    main(random_weights=True, draft_model_size=tiny, target_model_size=tiny, Ks=(1, 2), n_tokens_to_generate=4,
         repeats=1, dry_run=True, sample_run_tokens=4, drafters="", trees="", sample_run_sizes=(tiny, tiny),
         exactness=False)
    out = capsys.readouterr().out
    for name in ("worked-round", "cost-table", "cost-summary", "sample-run", "machine"):
        assert f"--- {name}\n" in out, name
    table = out.split("--- cost-table\n")[1].split("\n\n")[0]
    header, *rows = markdown_rows(table)
    assert [row[0] for row in rows] == ["1", "2"] and len(set(re.findall(r"α = ([\d.]+)", " ".join(header)))) == 1
    assert "$ python main.py --draft_model_size /tmp/random-tiny-draft --target_model_size /tmp/random-tiny-target" in out
