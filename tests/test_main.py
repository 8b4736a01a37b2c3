"""main.py end to end, as a learner runs it: `python main.py ...` in a subprocess, on tiny random models.

OpenAI's weights cannot be downloaded here, so the models are tiny random GPT-2s (n_embd 8, 2 layers) saved as
Hugging Face folders (config.json + model.safetensors, written by tools/model_files.py) next to the real tokenizer
files (encoder.json + vocab.bpe from the `release_124M_dir` fixture). The real tokenizer has 50257 tokens, so
the tiny models do too: 50257 * 8 floats = 1.6 MB per model, written into tmp_path only.

The peer for the texts is a greedy decoder written here from `gpt2.gpt2` alone: the whole sequence, no cache,
argmax of the last row. At temperature 0 both of main.py's samplers must print its text, whatever the drafter.

The trace, the colors and the picture are checked against the run's own report (rounds, kept and checked
guesses), since their content is decided by random draws; show.py's formats are pinned down by
tests/test_show.py on hand-made rounds. What fails, and how it says so, is tests/test_main_failures.py's.
"""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from encoder import get_encoder
from gpt2 import gpt2
from tools.model_files import write_hf_folder
from tools.random_models import TINY_HPARAMS, near_params, tiny_params

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"

PROMPT = "Alan Turing theorized that computers"


# ------------------------------------------------------------------------------------------------------------
# Tiny models as Hugging Face folders, and running main.py
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def target_dir(tmp_path, release_124M_dir):
    return write_hf_folder(tmp_path / "target", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)


@pytest.fixture
def draft_dir(tmp_path, release_124M_dir):
    """A different random model: its guesses are mostly wrong, which must cost speed but never change the text."""
    return write_hf_folder(tmp_path / "draft", tiny_params(seed=2), TINY_HPARAMS, release_124M_dir)


def run_main(*flags, cwd, env=None):
    """`python main.py *flags` in a subprocess; returns the CompletedProcess (text stdout and stderr)."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "main.py"), *map(str, flags)],
        cwd=cwd, capture_output=True, text=True, encoding="utf-8", timeout=120,
        env={**(env or {}), **_base_env()},
    )


def _base_env():
    import os

    env = {k: v for k, v in os.environ.items() if k != "GPT2_BASE_URL"}
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def greedy_text(folder, params, n_new):
    """The peer: greedy decoding of PROMPT by full passes of gpt2 (no cache, no sampling.py), as prompt + text."""
    encoder = get_encoder(folder.name, str(folder.parent))
    ids = encoder.encode(PROMPT)
    n_prompt = len(ids)
    for _ in range(n_new):
        logits = gpt2(ids, **params, n_head=TINY_HPARAMS["n_head"])  # [len(ids), n_vocab]
        ids.append(int(np.argmax(logits[-1])))
    return PROMPT + encoder.decode(ids[n_prompt:])


def one_error_line(result):
    """The single `error: ...` line a bad run writes to stderr (and nothing that looks like a traceback)."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


# ------------------------------------------------------------------------------------------------------------
# The head to head
# ------------------------------------------------------------------------------------------------------------


def test_the_run_prints_both_greedy_texts_times_speedup_acceptance_and_target_passes(tmp_path, target_dir, draft_dir):
    """Temperature 0, N = 12, K = 3, a draft that is a different random model.

    Both samplers must print the peer's greedy text (speculative sampling is exact, whatever the draft), and
    the summary lines must be there. Autoregressive sampling makes one target pass per token: 12. Speculative
    sampling writes 1 to K + 1 = 4 tokens per target pass, so between ceil(12 / 4) = 3 and 12 passes.
    """
    result = run_main("--prompt", PROMPT, "--n_tokens_to_generate", 12, "--K", 3, "--temperature", 0,
                      "--draft_model_size", draft_dir, "--target_model_size", target_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    expected = greedy_text(target_dir, tiny_params(seed=1), n_new=12)

    ar_part, sp_part = out.split("speculative sampling, draft")
    assert expected in ar_part and expected in sp_part
    for part in (ar_part, sp_part):
        assert re.search(r"12 tokens in \d+\.\d\d s = \d+\.\d\d tokens/s", part)
    assert re.search(r"^speedup: \d+\.\d\dx", out, flags=re.MULTILINE)
    assert re.search(r"^acceptance rate: [01]\.\d\d ", out, flags=re.MULTILINE)
    passes = re.search(r"^target forward passes: autoregressive (\d+), speculative (\d+)", out, flags=re.MULTILINE)
    assert passes and int(passes.group(1)) == 12 and 3 <= int(passes.group(2)) <= 12
    assert "the two texts are identical: yes" in out
    rounds = re.search(r"(\d+) rounds, (\d+) target forward passes", sp_part)
    assert rounds and rounds.group(1) == rounds.group(2) == passes.group(2)  # a round is one target pass
    assert re.search(rf"^drafter model, K=3: {rounds.group(1)} rounds, mean k [0-3]\.\d\d$", out, flags=re.MULTILINE)
    assert "\x1b[" not in out  # --color auto and stdout is a pipe: no color codes

    # Acceptance by position: a position after the first is checked only once the guesses before it were kept.
    # So when no guess at all was kept, positions 2 and 3 print n/a (0 of 0 is not a rate), not 0.00.
    line = re.search(r"^acceptance rate: .*$", out, flags=re.MULTILINE).group(0)
    rates = line.split("by draft position 1..3: ")[1].rstrip(")").split(", ")
    assert len(rates) == 3 and all(re.fullmatch(r"[01]\.\d\d|n/a", rate) for rate in rates)
    if re.search(r"\(0 of \d+ checked", line):
        assert rates == ["0.00", "n/a", "n/a"]


MACHINE_WORDS = ("route", "vector", "padded", "panel", "blocks ")  # what --verbose may say, and the default not


def test_the_default_output_says_in_plain_words_what_it_kept_in_the_folder_and_verbose_adds_the_routes(
        tmp_path, target_dir, draft_dir):
    """A learner's run names no machine vocabulary: the line about the untimed measurement says in words what was
    measured and the file it was kept in (target/routes.json). --verbose adds the routes themselves."""
    flags = ("--prompt", PROMPT, "--n_tokens_to_generate", 4, "--K", 2, "--draft_model_size", draft_dir,
             "--target_model_size", target_dir)
    plain = run_main(*flags, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    kept = Path(target_dir) / "routes.json"
    assert kept.is_file() and "how this machine multiplies matrices fastest: measured now (" in plain.stdout
    assert f"not timed), kept in {kept} for the next run" in plain.stdout
    words = [line.replace(str(kept), "") for line in plain.stdout.splitlines() if not line.startswith(PROMPT)]
    assert [line for line in words if any(word in line.lower() for word in MACHINE_WORDS)] == []
    verbose = run_main(*flags, "--verbose", cwd=tmp_path)
    assert verbose.returncode == 0, verbose.stderr
    assert f"how this machine multiplies matrices fastest: as measured before, kept in {kept} (" in verbose.stdout
    extra = [line for line in verbose.stdout.splitlines() if "route" in line.replace(str(kept), "").lower()]
    assert len(extra) == 1, verbose.stdout


def test_a_draft_equal_to_the_target_has_every_guess_accepted(tmp_path, target_dir):
    """Draft = target (the same folder), temperature 0: every guess is the target's own greedy token.

    So the acceptance rate is 1.00 and every round writes K + 1 = 4 tokens: 12 tokens take 12 / 4 = 3 target
    passes (the last round also has room for all 3 guesses + 1, since 8 + 4 = 12).
    """
    result = run_main("--prompt", PROMPT, "--n_tokens_to_generate", 12, "--K", 3,
                      "--draft_model_size", target_dir, "--target_model_size", target_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^acceptance rate: 1\.00 ", result.stdout, flags=re.MULTILINE)
    assert "target forward passes: autoregressive 12, speculative 3 " in result.stdout
    assert "the two texts are identical: yes" in result.stdout


def test_without_the_cache_both_samplers_recompute_and_still_print_the_greedy_text(tmp_path, target_dir, draft_dir):
    """--kv_cache false (picoGPT's way) changes the cost of a pass, never the tokens: same peer text, twice.

    Lower-case "false" on purpose: fire alone reads it as the string "false", which is true, and runs WITH the cache.
    """
    result = run_main("--prompt", PROMPT, "--n_tokens_to_generate", 8, "--K", 2, "--kv_cache", "false",
                      "--draft_model_size", draft_dir, "--target_model_size", target_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "KV cache OFF" in result.stdout
    assert result.stdout.count(greedy_text(target_dir, tiny_params(seed=1), n_new=8)) == 2
    assert "the two texts are identical: yes" in result.stdout


def test_sampling_with_temperature_top_k_and_top_p_is_reproducible_from_the_seed(tmp_path, target_dir, draft_dir):
    """At temperature 0.8 with top_k and top_p the texts are samples; the same --seed must print the same ones."""
    flags = ("--prompt", PROMPT, "--n_tokens_to_generate", 6, "--K", 2, "--temperature", 0.8, "--top_k", 40,
             "--top_p", 0.9, "--seed", 7, "--draft_model_size", draft_dir, "--target_model_size", target_dir)
    first, second = run_main(*flags, cwd=tmp_path), run_main(*flags, cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    texts = [[line for line in run.stdout.splitlines() if line.startswith(PROMPT)] for run in (first, second)]
    assert len(texts[0]) == 2 and texts[0] == texts[1]
    assert "temperature 0.8: the two texts are two samples from the same distribution" in first.stdout


# ------------------------------------------------------------------------------------------------------------
# Drafters, trees, the stream, the trace and the picture
# ------------------------------------------------------------------------------------------------------------


def report_numbers(out):
    """(rounds, kept guesses, checked guesses) as the report prints them."""
    rounds = int(re.search(r"; (\d+) rounds, \d+ target forward passes", out).group(1))
    kept, checked = map(int, re.search(r"^acceptance rate: [\d.]+ \((\d+) of (\d+) checked", out, re.M).groups())
    return rounds, kept, checked


def trace_lines(out):
    return [line for line in out.splitlines() if line.startswith("round ")]


@pytest.mark.parametrize("flags, report", [
    (("--drafter", "lookup", "--draft_model_size", "no/such/folder"), r"drafter lookup, K=3: \d+ rounds, mean k "
     r"[\d.]+; \d+ of \d+ rounds \(\d+%\) found a match"),
    (("--drafter", "staged", "--max_ngram", 2), r"drafter staged, K=3: \d+ rounds, mean k [\d.]+\n"),
    (("--K", "auto"), r"drafter model, K=auto: \d+ rounds, mean k [\d.]+"),
    (("--K", "hf"), r"drafter model, K=hf: \d+ rounds, mean k [\d.]+"),
    (("--tree", "2,2,1", "--plot", "rounds.png"), r"tree: [\d.]+ nodes per target pass; accepted paths went "
     r"[\d.]+ deep on average, \d+ at most \(rounds by depth: 0: \d+"),
], ids=["lookup", "staged", "auto", "hf", "tree"])
def test_every_drafter_prints_the_greedy_text_its_rounds_and_one_trace_line_per_round(tmp_path, target_dir,
                                                                                     draft_dir, flags, report):
    """Temperature 0: whatever proposes the guesses, speculative sampling prints the target's greedy text.

    The trace has exactly one `round N:` line per round the report counts (N = 1, 2, ... in order), its guesses
    marked kept add up to the report's kept guesses, and kept + rejected to the checked ones. With lookup no
    draft model is loaded: --draft_model_size names a folder that does not exist, and nobody minds.
    """
    draft = () if "--draft_model_size" in flags else ("--draft_model_size", draft_dir)
    K = () if "--K" in flags else ("--K", 3)
    result = run_main("--prompt", PROMPT + PROMPT, "--n_tokens_to_generate", 12, "--trace", *K, *draft,
                      "--target_model_size", target_dir, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "the two texts are identical: yes" in out
    assert re.search(report, out), out
    rounds, kept, checked = report_numbers(out)
    lines = trace_lines(out)
    assert [line.split(":")[0] for line in lines] == [f"round {i}" for i in range(1, rounds + 1)]
    assert sum(line.count(" kept") for line in lines) == kept
    assert sum(line.count(" rejected") for line in lines) == checked - kept
    if "lookup" in flags:
        assert "loading the target" in out and "loading the draft" not in out and "no draft model" in out
        assert "drafter lookup (prompt lookup: the longest match, at least 1 token)" in out  # not "1 tokens"
    if "--tree" in flags:  # at temperature 0 every node has one candidate: the heading says what runs
        assert "tree 2,2,1 (10 nodes; at temperature 0 a chain of 3)" in out
    if "--plot" in flags:  # the picture of the rounds, written into cwd
        assert (tmp_path / "rounds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "the rounds are drawn in rounds.png" in out


def test_k_auto_measures_its_costs_before_the_timed_runs_and_a_saved_table_gives_the_same_tokens_again(
        tmp_path, target_dir):
    """--K auto times r(m) on this machine first (untimed), prints it, and writes it next to the target's folder;
    --r_table with that file plans with the same costs, so two runs with one seed at temperature 1 print the
    same text (a fresh calibration could differ in its last digits, and so could its choice of k)."""
    flags = ("--prompt", PROMPT + PROMPT, "--n_tokens_to_generate", 12, "--drafter", "lookup", "--K", "auto",
             "--temperature", 1, "--seed", 3, "--target_model_size", target_dir)
    first = run_main(*flags, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    table = Path(target_dir) / "r_table.json"
    assert "K=auto plans with costs measured on this machine" in first.stdout and f"(kept in {table}:" in first.stdout
    assert re.search(r"^r\(m\), m = 1\.\.17: 1\.00( \d+\.\d\d){16}; o = \d+\.\d{3} \(a 1-position target pass",
                     first.stdout, re.M)
    assert "; routes:" not in first.stdout  # the routes of the costs are --verbose's
    again = [run_main(*flags, "--r_table", table, cwd=tmp_path) for _ in range(2)]
    assert all(run.returncode == 0 for run in again) and f"K=auto plans with the costs in {table}" in again[0].stdout
    texts = [[line for line in run.stdout.splitlines() if line.startswith(PROMPT)] for run in again]
    assert len(texts[0]) == 2 and texts[0] == texts[1]


def masked(out):
    """The output without what changes from run to run: times, tokens/s, the speedup, and the line about how
    this machine multiplies matrices (the first run measures it, the next reads it from the folder)."""
    out = re.sub(r"(?m)^.*routes\.json.*$", "routes.json ...", out)
    out = re.sub(r"\d+\.\d\d s = \d+\.\d\d tokens/s", "T s = R tokens/s", out)
    return re.sub(r"speedup: \d+\.\d\dx", "speedup: Sx", out)


def test_stripped_of_its_colors_always_prints_exactly_what_never_prints(tmp_path, target_dir, release_124M_dir):
    """--color always paints the speculative text and the trace; without the codes it is --color never's text.

    The draft is the target plus noise (near_params) at temperature 1, so the run has all three colors: green
    (a kept guess, code 32), red (a residual token, 31) and blue (a bonus token, 34). It is the README's run.
    """
    import show

    near = write_hf_folder(tmp_path / "near", near_params(tiny_params(seed=1), np.random.default_rng(5), 0.2),
                           TINY_HPARAMS, release_124M_dir)
    flags = ("--prompt", PROMPT, "--n_tokens_to_generate", 30, "--K", 4, "--temperature", 1, "--trace",
             "--draft_model_size", near, "--target_model_size", target_dir)
    always, never = run_main(*flags, "--color", "always", cwd=tmp_path), run_main(*flags, "--color", "never",
                                                                                 cwd=tmp_path)
    assert always.returncode == 0 and never.returncode == 0, always.stderr + never.stderr
    routes = Path(target_dir) / "routes.json"  # the first run measures and keeps them, the second reads them
    assert "multiplies matrices fastest: measured now (" in always.stdout
    assert f"kept in {routes} for the next run" in always.stdout
    assert f"multiplies matrices fastest: as measured before, kept in {routes} (" in never.stdout
    assert all(f"\x1b[{code}m" in always.stdout for code in (32, 31, 34)) and "\x1b[" not in never.stdout
    assert masked(show.strip_colors(always.stdout)) == masked(never.stdout)
    assert "colors: green = a draft guess the target kept, red = the target's token after a rejection" in never.stdout
    rounds, kept, checked = report_numbers(never.stdout)
    lines = trace_lines(never.stdout)
    assert len(lines) == rounds and sum(line.count(" kept") for line in lines) == kept > 0
    assert sum(line.count(" rejected") for line in lines) == checked - kept > 0
    # the README's trace excerpt ("Watching the rounds") is this run's: it goes stale if the sampler changes
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    excerpt = readme.split("<!-- trace-excerpt: begin -->\n```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert excerpt and excerpt == lines[: len(excerpt)]


def run_on_a_terminal(flags, cwd, env):
    """main.py with its stdout on a pseudo-terminal (so isatty() is True): everything it wrote there."""
    import os

    pty = pytest.importorskip("pty", reason="pseudo-terminals are POSIX's (Linux, macOS)")
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), *map(str, flags)], cwd=cwd,
                               stdout=follower, stderr=subprocess.PIPE, env={**_base_env(), **env})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=120) == 0, process.stderr.read()
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_auto_colors_a_terminal_unless_no_color_is_set(tmp_path, target_dir, draft_dir):
    """On a terminal --color auto paints; with NO_COLOR=1 it does not (https://no-color.org). (A pipe: the tests
    above.)"""
    flags = ("--prompt", PROMPT, "--n_tokens_to_generate", 4, "--K", 2, "--draft_model_size", draft_dir,
             "--target_model_size", target_dir)
    assert "\x1b[3" in run_on_a_terminal(flags, tmp_path, {})
    assert "\x1b[" not in run_on_a_terminal(flags, tmp_path, {"NO_COLOR": "1"})


def test_help_explains_every_flag(tmp_path):
    """Every parameter of main.main shows up in --help as a flag with a line of its own explanation.

    Fire writes the help to stderr when it is not a terminal; each flag is a line `--name=NAME`, followed by
    `Type: ...` / `Default: ...` lines (a long default is cut to `D...`) and then the docstring's words.
    """
    import inspect

    import main

    result = run_main("--help", cwd=tmp_path)
    assert result.returncode == 0
    help_text = result.stdout + result.stderr
    for name in inspect.signature(main.main).parameters:
        assert f"--{name}=" in help_text, f"--{name} is not in --help:\n{help_text}"
        after_flag = help_text.split(f"--{name}=", 1)[1].splitlines()[1:]
        explanation = [line.strip() for line in after_flag[:4]
                       if not line.strip().startswith(("Type:", "Default:", "D..."))][0]
        assert len(explanation) > 10 and "--" not in explanation[:2], f"--{name} has no explanation:\n{help_text}"


@pytest.mark.parametrize("argv", [["-h"], ["--draft_model_size", "no-such-model", "-n", "3", "--help"]])
def test_h_and_help_after_other_flags_show_the_help_without_running_anything(tmp_path, argv):
    """`-h` is help (fire alone read it as --html, a unique first letter), and --help after other flags shows the
    help of main alone: fire handed the whole line ran main first (here it would fail on the model's name)."""
    result = run_main(*argv, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--draft_model_size=" in result.stdout + result.stderr and "error" not in result.stdout + result.stderr
