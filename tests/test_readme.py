"""README.md, docs/BENCHMARKS.md and EXERCISES.md say what the code does: their numbers are the scripts' output, their
links land, and the README stays a learning path.

Read the README first; tools/make_readme_figures.py writes the blocks checked here. What a test can check about
prose: that a block a page shows as a script's output is that output, that the numbers a learner is told to
recompute come out, that links to lines of code land on the code they name (and never inside an exercise's
answer), that a term is defined before it is used, that counts quoted in EXERCISES.md are the counts in the
tests, and that the README stays short and cites no issue numbers.
"""

import re

import numpy as np
import pytest

from conftest import REPO_ROOT
from page_blocks import BENCHMARKS, EXERCISES, ONE_COMMAND, PAGES, README, generated_block, markdown_rows
from test_measured_tables import CHECKS, check_llama_cpp, check_peer_speed

from tools import worked_round
from tools.machine import KINDS, NOT_MEASURED, machine_kind


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
    """tools/worked_round.py spells the algorithm out instead of calling sampling.py, drawing its uniforms in the
    sampler's order (Step 1's draws, then one per check, then the residual's or the bonus token's). So the
    sampler, given the same tables, prompt, K and seed, must write the same tokens."""
    from sampling import speculative_sampling
    from tools.markov import markov_model

    rounds = worked_round.worked_rounds()
    written = [token for rnd in rounds for token in rnd["written"]]
    draft, target = markov_model(worked_round.DRAFT_TABLE), markov_model(worked_round.TARGET_TABLE)
    out = speculative_sampling(worked_round.PROMPT, draft, target, len(written), worked_round.K,
                               np.random.default_rng(worked_round.SEED))
    assert out[len(worked_round.PROMPT) :] == written


def test_running_the_worked_round_leaves_the_repositorys_pictures_alone(tmp_path, monkeypatch, capsys):
    """`python tools/worked_round.py` is for a learner to run: it draws into a new temporary folder, and only
    the figures command (which passes --out img) rewrites the README's pictures in img/."""
    pytest.importorskip("matplotlib")
    pictures = {path: path.stat().st_mtime_ns for path in (REPO_ROOT / "img").iterdir()}
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    worked_round.main()
    assert {path: path.stat().st_mtime_ns for path in (REPO_ROOT / "img").iterdir()} == pictures
    drawn = sorted(path.name for path in tmp_path.rglob("*.png"))
    assert drawn == ["kv_caches_round.png", "worked_round_overlap.png"], drawn


def test_without_matplotlib_the_worked_round_prints_its_rounds_and_says_what_the_pictures_need(tmp_path, monkeypatch,
                                                                                                  capsys):
    """The README shows `python tools/worked_round.py` printing the rounds: they need NumPy alone, and where the
    optional plots extra is missing the pictures are one line saying how to get it (they were a traceback)."""
    import builtins

    real_import = builtins.__import__

    def without_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_matplotlib)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # its folder for the pictures, left empty
    worked_round.main()
    out = capsys.readouterr().out
    assert out.startswith(worked_round.report(worked_round.worked_rounds()))
    assert out.endswith("the two pictures need matplotlib, an optional extra: pip install -r requirements/plots.txt\n")


def test_the_worked_round_uses_the_exactness_tests_tables():
    from test_speculative_exactness import DRAFT_TABLE, TARGET_TABLE
    assert np.array_equal(worked_round.TARGET_TABLE, TARGET_TABLE)
    assert np.array_equal(worked_round.DRAFT_TABLE, DRAFT_TABLE)


def line_links(text):
    """[(code, path, line)] of the links like [`def _score`](sampling.py#L455) in text."""
    return [(name, path, int(line)) for name, path, line in
            re.findall(r"\[`([^`]+)`[^\]]*\]\(([\w/]+\.py)#L(\d+)\)", text)]


def test_line_links_land_on_the_code_their_text_names():
    """A link like [`_score`](sampling.py#L455) must point at a line holding `_score`: line numbers go stale
    whenever a file above them changes, and a learner following a stale link reads the wrong function."""
    links = line_links(README) + line_links(BENCHMARKS)
    assert links, "expected line links into the code"
    for name, path, line in links:
        lines = (REPO_ROOT / path).read_text(encoding="utf-8").splitlines()
        assert int(line) <= len(lines) and name in lines[int(line) - 1], (
            f"{path}#L{line} should show {name!r}; it shows {lines[int(line) - 1] if int(line) <= len(lines) else 'nothing'!r}")


def test_the_glossary_defines_the_terms_a_learner_meets():
    glossary = (REPO_ROOT / "docs/GLOSSARY.md").read_text(encoding="utf-8")
    assert "(docs/GLOSSARY.md)" in README.split("\n## ", 1)[0], "the README's opening links the glossary"
    for term in ("α (alpha)", "KV cache", "memory-bound", "the floor", "OpenBLAS repacking", '"never"', "BPE",
                 "tiktoken", "drafter", "target", "top-k, top-p", "picoGPT", "total variation", "McDiarmid",
                 "suffix automaton", "**OpenBLAS:**"):
        assert term in glossary, term


# What the sample run's lines say, outside the generated texts and the paths: each term is in the glossary.
SAMPLE_RUN_TERMS = {
    "draft": "draft, drafter", "target": "target", "layers": "layers, wide", "wide": "layers, wide",
    "K=": "K, p, q", "drafter": "draft, drafter", "temperature": "temperature", "top_k": "top-k, top-p",
    "seed": "seed", "KV cache": "KV cache", "routes.json": "routes.json, r_table.json",
    "autoregressive sampling": "autoregressive sampling", "speculative sampling": "speculative sampling",
    "forward passes": "forward pass (target pass, draft pass)", "rounds": "round", "speedup": "speedup",
    "wall time": "wall time", "acceptance rate": "α (alpha), the acceptance rate", "draft position": "draft position",
    "tokens per target pass": "tokens per target pass", "mean k": "k (a round's), mean k",
    "greedy text": "greedy decoding, the greedy text", "free token": "bonus token", "rejection": "residual",
}
MACHINE_WORDS = ("route", "vector", "padded", "panel", "blocks ", "kernel", "BLAS", "fingerprint")


def test_the_sample_run_speaks_the_learners_language():
    """The README's sample run (python main.py's default output) uses no machine vocabulary, and every term it
    does use is defined in the glossary; --verbose (named in the README) is where the routes are printed."""
    glossary = (REPO_ROOT / "docs/GLOSSARY.md").read_text(encoding="utf-8")
    run = generated_block(README, "sample-run")
    lines = [line for line in run.splitlines() if not line.startswith(("Alan Turing", "$ python", "(Measured"))]
    words = "\n".join(lines).replace("/tmp/random-355M/routes.json", "routes.json")
    machine = [word for word in MACHINE_WORDS if word.lower() in words.replace("routes.json", "").lower()]
    assert machine == [], f"the sample run speaks machine: {machine}"
    for term, entry in SAMPLE_RUN_TERMS.items():
        assert term in words, f"{term!r} is no longer in the sample run: drop it here"
        assert f"- **{entry}" in glossary, f"the sample run says {term!r}, but the glossary has no **{entry}**"
    assert "`--verbose`" in README


def test_no_page_suggests_writing_over_a_tracked_file():
    """A command a learner copies from a page or from main.py's docstring and --help (`--plot FILE`) must not
    overwrite a file of the repository, such as img/rounds.png: the figures command alone rewrites those."""
    import subprocess

    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.split())
    if not tracked:
        pytest.skip("not a git checkout: no list of tracked files")
    pages = ["README.md", "EXERCISES.md", *[f"docs/{path.name}" for path in (REPO_ROOT / "docs").glob("*.md")],
             "main.py", "command_line/flags.py"]
    written = [(page, path) for page in pages
               for path in re.findall(r"(?:--plot[ =]|e\.g\. )([\w./-]+\.png)", (REPO_ROOT / page).read_text("utf-8"))]
    assert len(written) >= 3, f"the pages suggest --plot files: the scan must find them ({written})"
    assert [(page, path) for page, path in written if path in tracked] == []


def test_exercises_quote_the_number_of_texts_the_tiktoken_comparison_runs():
    """Step 5 says how many texts the encoder is compared with tiktoken on: the size of test_encoder's CORPUS."""
    test_encoder = pytest.importorskip("test_encoder")
    assert f"on {len(test_encoder.CORPUS)} texts" in EXERCISES
    assert f"compared on {len(test_encoder.CORPUS)} cases" in README


# ------------------------------------------------------------------------------------------------------------
# The parts tools/make_readme_figures.py writes: one command, one run, internally consistent
# ------------------------------------------------------------------------------------------------------------


def test_every_generated_part_names_the_one_command_that_wrote_it():
    """Each mark names the one command; a part remeasured alone (--only) names its own and says so in its text."""
    for page, text in PAGES.items():
        for name, command in re.findall(r"<!-- ([\w-]+): begin \(([^)]*)\) -->", text):
            if command != ONE_COMMAND:
                assert command.startswith("python tools/make_readme_figures.py --only "), (page, name, command)
                block = " ".join(generated_block(text, name).split())
                assert "Measured alone, not in the run" in block or block.startswith(NOT_MEASURED), name
        machine = generated_block(text, "machine")
        assert machine.startswith(f"Made by `{ONE_COMMAND}`") and "cores" in machine, page


def test_the_cost_tables_predictions_follow_from_its_own_c_and_r_at_one_alpha():
    """Each prediction is (1 - a^(K+1)) / ((1 - a)(cK + r)) of the c and r printed beside it (c to 3 digits,
    r to 2: a prediction moves by less than 0.02), at the ONE alpha the header names; each break-even alpha
    solves prediction = 1, and "never" means even alpha = 1 does not reach 1."""
    from lookahead import predicted_speedup

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
    from tools.pages import replace_block

    text = "intro\n<!-- t: begin (old) -->\nold\n<!-- t: end -->\noutro\n"
    assert replace_block(text, "t", "new\n", "cmd") == "intro\n<!-- t: begin (cmd) -->\nnew\n<!-- t: end -->\noutro\n"
    with pytest.raises(ValueError, match="no <!-- u: begin -->"):
        replace_block(text, "u", "new", "cmd")


def test_fix_line_links_moves_a_stale_link_to_its_code(tmp_path):
    from tools.pages import fix_line_links

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


def test_make_readme_figures_runs_end_to_end_on_tiny_models(tmp_path, release_124M_dir, monkeypatch, capsys):
    """The one command, on tiny random models and without touching README.md (--dry_run): every part it
    writes is printed, and its cost table passes the checks the README's does."""
    from tools import main_runs
    from tools.make_readme_figures import main
    from test_main import TINY_HPARAMS, tiny_params, write_hf_folder

    monkeypatch.setattr(main_runs, "PAGE_SIZE_TOKENS", 100)  # the page-size part's way, on a short run
    tiny = str(write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir))
    main(random_weights=True, draft_model_size=tiny, target_model_size=tiny, Ks=(1, 2), n_tokens_to_generate=4,
         repeats=1, dry_run=True, sample_run_tokens=4, drafters="", trees="", sample_run_sizes=(tiny, tiny),
         exactness=False, forward_sizes="", forward_context_size=None, loading_sizes="", timings=False,
         agreement=False, text_repeats=0, llama_repeats=0, grading_submissions=0)
    out = capsys.readouterr().out
    for name in ("worked-round", "cost-table", "cost-summary", "sample-run", "machine"):
        assert f"--- {name}\n" in out, name
    table = out.split("--- cost-table\n")[1].split("\n\n")[0]
    header, *rows = markdown_rows(table)
    assert [row[0] for row in rows] == ["1", "2"] and len(set(re.findall(r"α = ([\d.]+)", " ".join(header)))) == 1
    assert "$ python main.py --draft_model_size /tmp/random-tiny-draft --target_model_size /tmp/random-tiny-target" in out


def test_the_sample_run_alone_is_main_py_on_random_models_marked_as_measured_alone(tmp_path, capsys, release_124M_dir):
    """`--only sample-run` remakes the README's sample run without the rest of a --random_weights run: the same
    main.py command on random models of the given shapes, its output, and the note that it was measured alone by
    the command as given (each flag that is not its default)."""
    from tools.make_readme_figures import main
    from test_main import TINY_HPARAMS, tiny_params, write_hf_folder

    tiny = str(write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir))
    main(only="sample-run", sample_run_sizes=(tiny, tiny), sample_run_tokens=2, dry_run=True)
    out = capsys.readouterr().out
    part = out.split("--- sample-run\n")[1]
    assert part.startswith("```text\n$ python main.py --draft_model_size /tmp/random-tiny-draft "), part[:200]
    assert "autoregressive sampling" in part and "speculative sampling" in part
    command = (f"`python tools/make_readme_figures.py --only sample-run --sample_run_tokens 2 --sample_run_sizes "
               f"{tiny},{tiny}`")
    assert command in " ".join(part.split()), "the note names the command with the flags given"


def test_the_command_a_part_records_names_each_flag_given_a_value_other_than_its_default():
    """A part's marks and note name the command that remakes it: --random_weights, and every flag that changed what
    was measured (a llama.cpp part made with --llama_repeats 9 once sat under a mark that runs 5); not where the
    run wrote (--pages, --img_dir) nor --dry_run."""
    import inspect
    from tools.make_readme_figures import main, remake_command

    given = {name: parameter.default for name, parameter in inspect.signature(main).parameters.items()}
    assert remake_command(given) == "python tools/make_readme_figures.py"
    given.update(random_weights=True, llama_repeats=9, exactness=False, Ks=(1, 2), drafters="model, lookup",
                 only="llama-cpp", img_dir="/tmp/img", dry_run=True)
    assert remake_command(given) == ("python tools/make_readme_figures.py --only llama-cpp --random_weights --Ks 1,2 "
                                     "--drafters 'model, lookup' --noexactness --llama_repeats 9")


def test_without_chromium_the_rounds_page_part_says_its_picture_was_not_remade(tmp_path, release_124M_dir, monkeypatch,
                                                                                capsys):
    """The page-size part measures the page's size without a browser; the screenshot needs headless Chromium, and
    where there is none the run says so (it once left the old picture in place without a word)."""
    from tools import main_runs

    monkeypatch.setattr(main_runs, "PAGE_SIZE_TOKENS", 100)
    monkeypatch.setattr(main_runs.shutil, "which", lambda name: None)
    part = main_runs.rounds_page(release_124M_dir, tmp_path, dry_run=False)
    assert "rounds" in part  # the size is still measured
    assert f"{tmp_path / 'rounds_page.png'} not remade: no chromium on the PATH" in capsys.readouterr().err
    assert not (tmp_path / "rounds_page.png").exists()


def test_random_models_writes_loadable_folders_of_the_given_shapes_and_never_overwrites_one(
        tmp_path, release_124M_dir):
    """tools/random_models.py writes the sample run's folders: a Hugging Face folder per size that load_model
    reads back with the same shapes, the same weights for the same seed, and a clear error for a folder that
    exists already (a second run must not silently mix two models)."""
    from test_main import TINY_HPARAMS, tiny_params, write_hf_folder
    from tools.random_models import write_random_models
    from utils import load_model

    tiny = write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)
    first = write_random_models([str(tiny)], tmp_path / "a", seed=5, tokenizer_dir=release_124M_dir)
    again = write_random_models([str(tiny)], tmp_path / "b", seed=5, tokenizer_dir=release_124M_dir)
    assert [path.name for path in first] == ["random-tiny"]
    (_, hparams, params), (_, _, same) = load_model(first[0]), load_model(again[0])
    assert {key: hparams[key] for key in TINY_HPARAMS} == TINY_HPARAMS
    assert np.array_equal(params["wte"], same["wte"])
    with pytest.raises(ValueError, match="exists already"):
        write_random_models([str(tiny)], tmp_path / "a", seed=5, tokenizer_dir=release_124M_dir)


def test_the_readmes_trace_command_runs_on_the_models_random_models_trace_writes(tmp_path, release_124M_dir):
    """The README shows the trace excerpt's run whole: `tools/random_models.py --trace` writes the models of
    tests/test_main.py's trace run (whose output the test there compares with the excerpt), and main.py's
    command names them with the same flags."""
    from test_main import PROMPT, TINY_HPARAMS, near_params, tiny_params
    from tools.random_models import write_trace_models
    from utils import load_model

    near, target = write_trace_models(tmp_path, tokenizer_dir=release_124M_dir)
    (_, _, near_loaded), (_, _, target_loaded) = load_model(near), load_model(target)
    params = tiny_params(seed=1)
    assert np.array_equal(target_loaded["wte"], params["wte"])
    assert np.array_equal(near_loaded["wte"], near_params(params, np.random.default_rng(5), 0.2)["wte"])
    assert load_model(near)[1]["n_embd"] == TINY_HPARAMS["n_embd"]
    command = README.split("python tools/random_models.py --trace --folder models\n", 1)[1].split("\n", 1)[0]
    assert command == (f'python main.py --prompt "{PROMPT}" --n_tokens_to_generate 30 --K 4 --temperature 1 '
                       f"--trace --draft_model_size models/{near.name} --target_model_size models/{target.name} "
                       f"--plot rounds.png")


def test_the_break_even_table_is_its_recomputation_from_drafters_r_table():
    """No timing goes into it: the same every run, so the README must hold exactly what the script computes."""
    from tools.make_readme_figures import break_even_table

    assert generated_block("break-even-table") == break_even_table()


def test_the_break_even_tables_c_is_the_weight_ratio_k_auto_estimates():
    """n_weights counts what create_model_fn's n_params counts (wte once), so c is AutoK's own c."""
    import lookahead
    from loaders.random_weights import random_params
    from loaders.download import HPARAMS
    from tools.make_readme_figures import n_weights
    from model_fn import create_model_fn

    tiny, small = ({"n_vocab": 50, "n_ctx": 16, "n_embd": n, "n_head": 2, "n_layer": layers}
                   for n, layers in ((8, 2), (16, 3)))
    draft, target = (create_model_fn(random_params(h, np.random.default_rng(0)), h) for h in (tiny, small))
    assert (n_weights(tiny), n_weights(small)) == (draft.n_params, target.n_params)
    assert lookahead.AutoK(draft, target, 4).c == n_weights(tiny) / n_weights(small)
    assert n_weights(HPARAMS["124M"]) == 124_439_808


def test_the_hf_agreement_sentence_quotes_a_difference_under_the_tests_bound():
    from test_gpt2 import HF_TOLERANCE

    sentence = " ".join(generated_block("hf-agreement").split())
    worst, bound = re.search(r"matches within ([\d.e-]+) \(the bound is ([\d.e-]+)\)", sentence).groups()
    assert float(bound) == HF_TOLERANCE and float(worst) <= HF_TOLERANCE


def test_replace_block_indents_a_part_inside_a_list_item_as_its_marks():
    from tools.pages import replace_block

    text = "- item\n\n  <!-- t: begin (old) -->\n  old\n  <!-- t: end -->\n- next\n"
    assert replace_block(text, "t", "| a |\n\nline", "cmd") == (
        "- item\n\n  <!-- t: begin (cmd) -->\n  | a |\n\n  line\n  <!-- t: end -->\n- next\n")


def test_read_part_gives_what_replace_block_wrote_from_the_first_page_that_has_the_marks():
    """What is between a part's marks, as written (an indented part keeps its indent); '' where no page has it."""
    from tools.pages import read_part, replace_block

    pages = {"a.md": "no marks here\n", "b.md": "- item\n\n  <!-- t: begin (old) -->\n  old\n  <!-- t: end -->\n"}
    pages["b.md"] = replace_block(pages["b.md"], "t", "| new |", "cmd")
    assert read_part(pages, "t") == "  | new |\n"
    assert read_part(pages, "u") == ""


def test_wrapped_prose_never_splits_a_code_span():
    """A line starting with '+ ' from inside `"!" + c` would become a list item."""
    from tools.pages import wrap

    text = "word " * 21 + '`"!" + c + "\'s"` and more words'
    assert all(not line.startswith(("+", "c ")) for line in wrap(text).splitlines())
    assert '`"!" + c + "\'s"`' in wrap(text)


def dry_run_parts(out):
    """{name: content} of what `main(dry_run=True)` printed ('--- name' then the part, then a blank line)."""
    return dict(re.findall(r"^--- ([\w-]+)\n(.*?)\n\n(?=--- |\Z)", out, re.S | re.M))


def test_the_one_command_measures_the_forward_pass_loading_and_small_timings_of_a_tiny_model(
        tmp_path, release_124M_dir, monkeypatch, capsys):
    """The new parts end to end, in seconds: tools/benchmark_forward.py twice (default threads, then
    OPENBLAS_NUM_THREADS=1) and tools/measure_loading.py as processes of their own, on a tiny model folder; the
    small timings on tiny shapes. Every part has its marks in the README, and every table agrees with itself as
    the README's must. No timing is asserted."""
    from test_main import TINY_HPARAMS, tiny_params, write_hf_folder
    from tools import compare_llama_cpp, main_runs, make_readme_figures, measured_parts, small_parts

    tiny = str(write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir))
    monkeypatch.setitem(make_readme_figures.HPARAMS, "tiny", TINY_HPARAMS)
    monkeypatch.setattr(small_parts, "TIMED_SIZE", "tiny")
    monkeypatch.setattr(small_parts, "SETTLE_SECONDS", 0.0)  # (the pause before each timed product: no timing here)
    monkeypatch.setattr(small_parts, "UNICODE_LAST", 0xFFF)  # the count's way, on the first 4,000 code points
    monkeypatch.setattr(main_runs, "PAGE_SIZE_TOKENS", 100)  # the page-size part's way, on a short run
    monkeypatch.setattr(measured_parts, "peer_installed", lambda: False)  # the path when torch is missing
    monkeypatch.setattr(compare_llama_cpp, "missing_extras", lambda: ["llama_cpp"])  # and when llama.cpp is
    make_readme_figures.main(
        random_weights=True, draft_model_size=tiny, target_model_size=tiny, Ks=(1,), n_tokens_to_generate=2, repeats=1,
        dry_run=True, sample_run_tokens=2, drafters="", trees="", sample_run_sizes=(tiny, tiny), exactness=False,
        forward_sizes=tiny, forward_no_cache_sizes=tiny, forward_repeats=2, forward_n_new=2,
        forward_breakdown_rounds=2, forward_r_repeats=1, forward_context_size=tiny, forward_context_lengths="4,20",
        forward_context_rounds=1, peer_sizes=tiny, loading_sizes=tiny, loading_repeats=1,
        text_repeats=0, grading_submissions=1)
    parts = dry_run_parts(capsys.readouterr().out)
    kind = machine_kind()  # the per-kind parts are this machine's kind's
    for name in ("forward-run", "forward-table", "forward-breakdown", "forward-summary", "r-table", "context-table",
                 "peer-speed", f"llama-cpp-{kind}", "loading-table", "break-even-table", "lookup-timing", "bpe-timing",
                 "sampler-timing", f"design-timing-{kind}", f"pass-timing-{kind}", "hf-agreement", "unicode-count",
                 "grading-time", "machine"):
        assert name in parts, name
    assert "machine-kinds" not in parts  # llama.cpp was skipped: the README's table keeps what it had
    for name in parts:
        assert any(f"<!-- {name}: begin (" in page for page in PAGES.values()), f"no page has marks for {name}"
    for name, check in CHECKS.items():
        if name in parts:  # the other kind's parts are not made on this machine
            check(parts[name])
    assert "`python tools/benchmark_forward.py --sizes ''" in parts["forward-run"]
    assert "with `OPENBLAS_NUM_THREADS=1` in the environment" in parts["forward-run"]
    labels = [row[0] for row in markdown_rows(parts["context-table"])[1:]]
    assert "ms/token, median, 1 thread" in labels and len(labels) == 4, labels  # two rows per thread count
    assert "skipped" in parts["peer-speed"] and "skipped" in parts[f"llama-cpp-{kind}"]


def test_the_text_benchmark_part_is_tools_benchmark_texts_own_table_run_as_a_process(monkeypatch):
    """The figures command runs tools/benchmark_text.py as a process of its own (replaced here by what it writes
    with --json, from a tiny run) and puts its markdown table between docs/BENCHMARKS.md's text-benchmark marks."""
    import json

    from test_benchmark_text import TINY as TINY_SHAPES
    from tools import benchmark_text, measured_parts

    results, info = benchmark_text.run(["rewrite"], ["auto"], size="tiny", repeats=1, hparams=TINY_SHAPES,
                                       max_tokens=30, calibrate_repeats=1, progress=lambda line: None)
    data = json.loads(json.dumps(benchmark_text.to_json(results, info)))
    ran = []
    monkeypatch.setattr(measured_parts, "run_json_script", lambda args, env=None: ran.append(args) or data)
    block = measured_parts.text_benchmark_block(2)
    assert ran == [["tools/benchmark_text.py", "--repeats", 2]]
    assert block == benchmark_text.markdown_table(data) and "\n| rewrite | lookup, K=auto |" in block
    assert all(f"<!-- text-benchmark-{kind}: begin (" in PAGES["docs/BENCHMARKS.md"] for kind in KINDS)


def test_with_torch_installed_the_peer_runs_with_this_runs_sizes_prompt_tokens_and_threads(monkeypatch):
    """torch is not installed here, so tools/measure_hf_speed.py is replaced by what it writes with --json; the
    table then puts the peer's ms/token beside this repository's best run of the same size."""
    from tools import measured_parts
    from tools.benchmark_forward import SizeResult

    ran = []

    def fake_script(args, env=None):
        ran.append(args)
        return {"ms_per_token": {"124M": 36.0}, "transformers": "5.23", "torch": "2.13.0", "threads": 2,
                "n_prompt": 16, "n_new": 16, "repeats": 3}

    monkeypatch.setattr(measured_parts, "peer_installed", lambda: True)
    monkeypatch.setattr(measured_parts, "run_json_script", fake_script)
    forward = {"results": [SizeResult("124M", 1, 1, 1, sampler_steps=[0.018, 0.020]),
                           SizeResult("355M", 1, 1, 1, sampler_steps=[0.05])],
               "runs": [("python tools/benchmark_forward.py", {"threads": 2})]}
    block = measured_parts.peer_block(forward, ["124M"], {"n_prompt": 16, "n_new": 16})
    assert ran == [["tools/measure_hf_speed.py", "--sizes", "124M", "--n_prompt", 16, "--n_new", 16, "--threads", 2]]
    check_peer_speed(block)
    assert "| 124M | 36.0 | 18.0 | 2.00× |" in block


def test_the_figures_command_writes_into_the_pages_as_they_are_when_it_ends_not_as_they_were(tmp_path, capsys):
    """A run takes minutes, and the prose may be edited meanwhile: the parts go into the page as it is when the
    run writes, and a page whose parts did not change is not written at all."""
    import time

    from tools.make_readme_figures import write_or_print

    page, other = tmp_path / "PAGE.md", tmp_path / "OTHER.md"
    page.write_text("old prose\n<!-- part: begin (cmd) -->\nold\n<!-- part: end -->\n", encoding="utf-8")
    other.write_text("no parts here\n", encoding="utf-8")
    stale = {page: page.read_text(encoding="utf-8"), other: other.read_text(encoding="utf-8")}
    page.write_text(stale[page].replace("old prose", "prose edited during the run"), encoding="utf-8")
    other.write_text("edited too\n", encoding="utf-8")
    write_or_print(stale, {"part": "new"}, "cmd", dry_run=False, started=time.time())
    assert page.read_text(encoding="utf-8").startswith("prose edited during the run\n")
    assert "\nnew\n" in page.read_text(encoding="utf-8") and other.read_text(encoding="utf-8") == "edited too\n"


def test_with_llama_cpp_installed_the_figures_command_runs_the_comparison_and_puts_its_report_in_the_page(
        monkeypatch):
    """llama-cpp-python is not installed for the suite, so tools/compare_llama_cpp.py is replaced by what it writes
    with --json (made-up timings); the part is its markdown_report, which passes the page's own check."""
    from test_compare_llama_cpp import fake_data
    from tools import compare_llama_cpp, measured_parts

    ran = []
    monkeypatch.setattr(compare_llama_cpp, "missing_extras", lambda: [])
    monkeypatch.setattr(measured_parts, "run_json_script", lambda args, env=None: ran.append(args) or fake_data())
    block = measured_parts.llama_cpp_block(3)
    assert ran == [["tools/compare_llama_cpp.py", "--repeats", 3]]
    assert block == compare_llama_cpp.markdown_report(fake_data())
    check_llama_cpp(block)
    assert all(f"<!-- llama-cpp-{kind}: begin (" in PAGES["docs/BENCHMARKS.md"] for kind in KINDS)
