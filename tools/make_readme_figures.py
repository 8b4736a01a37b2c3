"""Every number, table and plot of README.md and docs/BENCHMARKS.md, from ONE run of ONE command (a tool).

Read the README first (it says what each number means), then the scripts this one runs; nothing here is on
the learner's path.

    python tools/make_readme_figures.py --random_weights            # what the pages show (no OpenAI weights
                                                                    # where this is developed)
    python tools/make_readme_figures.py                             # OpenAI's 124M and 355M (downloaded first)
    python tools/make_readme_figures.py --random_weights --dry_run  # print the generated parts, write nothing

README.md and docs/BENCHMARKS.md mark each generated part, `<!-- NAME: begin (the command) -->` ... `<!-- NAME:
end -->`, and this script replaces what is between the two marks and nothing else. The prose around the marks
says only what holds whatever a run measures; every number a run can change is inside a part, so the tables,
the plots and the sentences that quote them come from the same run. The parts, page by page:

    README        worked-round (tools/worked_round.py), exactness-table, cost-table and cost-summary (c and r
                  with and without the KV cache, the predicted speedup, break-even alphas), grading-time
                  (tools/time_grading.py), sample-run and page-size (tools/main_runs.py: main.py on random_models.py's
                  folders, not with real weights; main.py --html on tiny models, img/rounds_page.png by Chromium)
    BENCHMARKS    drafter-table and drafter-summary (tools/benchmark.py's drafters), tree-table,
                  break-even-table (from lookahead.R_TABLE, no timing), forward-run, forward-table,
                  forward-breakdown, forward-summary, r-table, context-table (tools/benchmark_forward.py),
                  peer-speed (tools/measure_hf_speed.py, with torch), llama-cpp (tools/compare_llama_cpp.py,
                  with llama-cpp-python), loading-table (tools/measure_loading.py), the small timings
                  lookup-timing, bpe-timing, sampler-timing, design-timing, pass-timing, and text-benchmark
                  (tools/benchmark_text.py on tools/texts/)
    per kind      design-timing, pass-timing, llama-cpp and text-benchmark are kept for each kind of machine
                  (tools/machine.machine_kind: OpenBLAS's AVX-512 kernels on Intel or on AMD, or its AVX2 ones), as
                  pass-timing-avx512, pass-timing-avx2, ...: a run writes its own kind's, the others left as they
                  were, dated; the README's machine-kinds table is made from every kind's llama-cpp part
    both          hf-agreement and unicode-count (how closely gpt2 matches Hugging Face's fixtures, how many
                  code points encoder.py and tiktoken encode differently), machine (which machine, when)

The scripts that must run in a process of their own (OpenBLAS reads its thread count when NumPy loads; a load's
peak memory needs a fresh process) are tools/measured_parts.py's, the small timings tools/small_parts.py's, and
tools/pages.py writes every part between its marks. It also moves the pages' line links, like
[`def _residual`](sampling.py#L1), to the line where the code in their backticks now is.

Numbers from a shared machine move from run to run: they are regenerated together, never patched one by one.
The one exception is --only: it remeasures the named parts alone, and their marks then name that command.
"""

import contextlib
import inspect
import io
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path


# `python tools/make_readme_figures.py` puts tools/ first on the path: put the repository's root there too (the
# modules it measures, and `tools.`)
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import speed.openblas_env  # noqa: E402,F401  before NumPy loads OpenBLAS, which reads its settings then

from tools import benchmark  # noqa: E402
import drafters  # noqa: E402
import lookahead  # noqa: E402
from command_line.flags import (as_bool, as_optional, as_text, as_whole_number, check_model_names,  # noqa: E402
                                check_models_dir, errors_as_one_line)
from command_line.scripts import as_fractions, as_names, as_whole_numbers, check_output_folder, run_script  # noqa: E402
from loaders.download import HPARAMS  # noqa: E402
from loaders.safe_files import write_atomically  # noqa: E402
from tools import benchmark_forward, forward_tables, release_files, worked_round  # noqa: E402
from tools.machine import KINDS, blas_description, blas_threads, machine_description, machine_kind  # noqa: E402
from tools.recorded import recorded  # noqa: E402
from tools.measured_parts import (  # noqa: E402
    CONTEXT_LENGTHS,
    FORWARD_SIZES,
    forward_blocks,
    kinds_table,
    llama_cpp_block,
    loading_table,
    measure_forward,
    peer_block,
    plot_forward,
    grading_block,
    run_json_script,
    text_benchmark_block,
)
from tools.main_runs import checked_sample_sizes, rounds_page, sample_run  # noqa: E402
from tools.pages import fix_line_links, fmt_alpha, read_part, span, wrap, write_parts  # noqa: E402
from tools.random_models import SAMPLE_RUN_SEED  # noqa: E402
from tools.small_parts import SMALL_PARTS  # noqa: E402

ALPHA = 0.8  # the one acceptance rate the cost table predicts at
KS = (1, 2, 4, 8)


# ------------------------------------------------------------------------------------------------------------
# The cost table
# ------------------------------------------------------------------------------------------------------------


def cost_table(costs_by_mode, Ks, alpha):
    """Markdown: one row per K, with the cache and without it side by side, predictions at ONE alpha."""
    head = ["K"]
    for costs in costs_by_mode:
        mode = "cache" if costs.kv_cache else "no cache"
        head += [f"c ({mode})", f"r ({mode})", f"predicted at α = {alpha:g}: r = 1 / measured r ({mode})",
                 f"break-even α ({mode})"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for K in Ks:
        cells = [str(K)]
        for costs in costs_by_mode:
            c, r = costs.c, costs.r(K)
            cells += [f"{c:.3f}", f"{r:.2f}",
                      f"{lookahead.predicted_speedup(alpha, K, c):.2f}× / {lookahead.predicted_speedup(alpha, K, c, r):.2f}×",
                      fmt_alpha(lookahead.break_even_alpha(K, c, r))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cost_summary(costs_by_mode, Ks, alpha, names):
    """The sentences that read the cost table, with its numbers."""
    cache, nocache = sorted(costs_by_mode, key=lambda costs: not costs.kv_cache)
    lines = []
    for costs, label in ((cache, "With the cache"), (nocache, "Without the cache")):
        rs = [costs.r(K) for K in Ks]
        leviathan = [lookahead.predicted_speedup(alpha, K, costs.c) for K in Ks]
        with_r = [lookahead.predicted_speedup(alpha, K, costs.c, costs.r(K)) for K in Ks]
        even = {K: lookahead.break_even_alpha(K, costs.c, costs.r(K)) for K in Ks}
        never = [K for K in Ks if even[K] is None]
        wins = [K for K in Ks if even[K] is not None]
        best = max(Ks, key=lambda K: lookahead.predicted_speedup(alpha, K, costs.c, costs.r(K)))
        text = (f"- **{label}, r = {span(rs)}** and c = {costs.c:.3f} ({names[0]} step / {names[1]} step). "
                f"At α = {alpha:g}, Leviathan's formula (r = 1) predicts {span(leviathan)}×; with the measured r "
                f"the prediction is {span(with_r)}× (best at K = {best}).")
        if wins:
            text += f" The pair breaks even at α = {span([even[K] for K in wins])} for K = {', '.join(map(str, wins))}"
            text += f", and never for K = {', '.join(map(str, never))}." if never else "."
        else:
            text += " No α breaks even at any K: even at α = 1 a round costs more target steps than it writes tokens."
        lines.append(wrap(text))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# The exactness table: the statistical test's own runs
# ------------------------------------------------------------------------------------------------------------


RULES = {  # the wrong rules of tests/test_speculative_exactness.py, in words; others are named by their key
    "a_resample_from_target": "on a rejection, resample from q instead of (q − p)₊",
    "b_argmax_draft_full_p_ratio": "draft the argmax but put the draft's full p in the ratio",
    "c_target_row_off_by_one": "compare against the target row one position off",
}


def rule_description(rule):
    """RULES[rule], or the key in words: 'd_keep_any_lookup' -> 'keep any lookup'."""
    return RULES.get(rule, " ".join(rule.split("_")[1:] if re.match(r"[a-z]_", rule) else rule.split("_")))


def exactness_table():
    """Markdown: the total variation of the correct sampler for each K of the test, and of each wrong rule,
    beside the bound each must stay under (correct) or exceed (wrong), as a run of the test records them."""
    runs = recorded("tests/test_speculative_exactness.py", "for_every_lookahead or fails_for_a_wrong_rule")
    correct = [run for name, run in runs.items() if "for_every_lookahead" in name]
    lines = ["| rule | total variation | bound |", "| --- | --- | --- |",
             f"| speculative, K = {', '.join(str(int(run['K'])) for run in correct)} (correct) | "
             f"{span([run['tv'] for run in correct], '{:.3f}')} | {span([run['bound'] for run in correct], '{:.3f}')} |"]
    wrong = {name.split("[")[1].rstrip("]"): run for name, run in runs.items() if "wrong_rule" in name}
    for rule in sorted(wrong):
        lines.append(f"| wrong: {rule_description(rule)} | {wrong[rule]['tv']:.3f} | {wrong[rule]['bound']:.3f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# The sample run
# ------------------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------------------
# When each drafter pays off by the cost model: lookahead.R_TABLE, no measurement
# ------------------------------------------------------------------------------------------------------------


BREAK_EVEN_KS = (1, 2, 3, 4, 7, 15)
BREAK_EVEN_PAIRS = (("124M", "355M"), ("124M", "1558M"))


def n_weights(hparams):
    """The weights of a GPT-2 of these shapes, counted as create_model_fn's `n_params` counts them (wte once:
    the LM head is tied to it). Per block 12 n_embd² + 13 n_embd: c_attn, attn's c_proj, c_fc and mlp's c_proj
    hold 3 + 1 + 4 + 4 = 12 n_embd² weights and 3 + 1 + 4 + 1 = 9 n_embd biases, ln_1 and ln_2 4 n_embd.

    n_weights(HPARAMS["124M"]) == 50257·768 + 1024·768 + 2·768 + 12·(12·768² + 13·768) == 124_439_808.
    """
    n_embd = hparams["n_embd"]
    per_block = 12 * n_embd**2 + 13 * n_embd
    return (hparams["n_vocab"] + hparams["n_ctx"]) * n_embd + 2 * n_embd + hparams["n_layer"] * per_block


def break_even_table(r_table=None, Ks=BREAK_EVEN_KS, pairs=BREAK_EVEN_PAIRS):
    """The break-even α of each drafter for each k, by the cost model with r(m) from lookahead.R_TABLE (the
    same lookup AutoK does: r(m) = r_table[min(m, len(r_table)) - 1]) and c as AutoK estimates it: 0 for
    prompt lookup (its `cost`), the ratio of the models' weights for a GPT-2 draft. No timing: the same
    every run, and tests/test_readme.py recomputes it."""
    r_table = list(lookahead.R_TABLE if r_table is None else r_table)

    def r(m):
        return r_table[min(m, len(r_table)) - 1]

    rows = [("lookup", drafters.PromptLookup.cost)]
    rows += [(f"{draft} drafting for {target}", n_weights(HPARAMS[draft]) / n_weights(HPARAMS[target]))
             for draft, target in pairs]
    even = {name: {K: lookahead.break_even_alpha(K, c, r(K + 1)) for K in Ks} for name, c in rows}
    lines = [wrap(f"With r(m) as `lookahead.R_TABLE` holds it (medians measured on 2-core machines; 124M, with the cache: "
                  f"r(2) = {r(2):.2f}, r(8) = {r(8):.2f}, r(16) = {r(16):.2f}), the α needed to break even is:"), "",
             "| drafter | c | " + " | ".join(f"k = {K}" for K in Ks) + " |", "|" + " --- |" * (len(Ks) + 2)]
    for name, c in rows:
        lines.append(f"| {name} | {f'{c:.3f}' if c else '0'} | " + " | ".join(fmt_alpha(even[name][K]) for K in Ks)
                     + " |")
    lines += ["", "(\"never\": no α ≤ 1 breaks even; c is the ratio of the models' weights, as K=\"auto\" "
                  "estimates it.)"]
    reading = []
    if 1 in Ks and all(even[name][1] is None for name, _ in rows):
        reading.append(f"a one-guess round never pays (it writes two tokens at best and costs at least r(2) = "
                       f"{r(2):.2f} steps)")
    for name, _ in rows:
        wins = {K: alpha for K, alpha in even[name].items() if alpha is not None}
        if wins:
            K = min(wins, key=wins.get)
            reading.append(f"{'a free lookup' if name == 'lookup' else name} needs α ≥ {wins[K]:.2f} at best "
                           f"(k = {K})")
        else:
            reading.append(f"{name} never pays")
    lines += ["", wrap("So with a KV cache, by this model, " + "; ".join(reading) + ".")]
    return "\n".join(lines)


def drafter_summary(drafter_rows):
    """The sentences that read the drafter table: the measured speedups by cache setting and K, and lookup's."""
    header, *rows = drafter_rows
    column = {name: i for i, name in enumerate(header)}

    def speedups(selected):
        return [float(row[column["speedup (measured)"]].rstrip("x×")) for row in selected]

    lines = []
    for cache, label in (("on", "With the cache"), ("off", "Without the cache")):
        mine = [row for row in rows if row[column["cache"]] == cache]
        Ks = list(dict.fromkeys(row[column["K"]] for row in mine))
        if not mine:
            continue
        parts = [f"{span(speedups([row for row in mine if row[column['K']] == K]))}× at K = {K}" for K in Ks]
        lookups = [row for row in mine if row[column["drafter"]] == "lookup"]
        text = f"- **{label}**, the measured speedups over the drafters and prompts: " + ", ".join(parts)
        text += f"; lookup's alone {span(speedups(lookups))}×." if lookups else "."
        lines.append(wrap(text))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------------


PAGES = ("README.md", "docs/BENCHMARKS.md")  # the files with generated parts


PER_KIND = ("design-timing", "pass-timing", "llama-cpp", "text-benchmark")  # kept for each kind (tools/machine.py)


def block_name(name):
    """The marks a part is written between: NAME-KIND for a part of PER_KIND, KIND this machine's ('avx2',
    'avx512'), so that a run on one kind of machine leaves the other kind's figures as they were, dated."""
    return f"{name}-{machine_kind()}" if name in PER_KIND else name


def with_kinds_table(blocks, texts, note=""):
    """blocks, and where a llama-cpp part was measured, the README's machine-kinds table made from it and from
    the other kind's part as the pages hold it (measured_parts.kinds_table), then `note`."""
    if block_name("llama-cpp") not in blocks or "skipped" in blocks[block_name("llama-cpp")]:
        return blocks
    parts = {kind: blocks.get(f"llama-cpp-{kind}") or read_part(texts, f"llama-cpp-{kind}") for kind in KINDS}
    return {**blocks, "machine-kinds": kinds_table(parts) + note}


def write_or_print(texts, blocks, command, dry_run, started):
    """Print the parts (dry_run), or write them into the pages and move the pages' line links."""
    minutes = (time.time() - started) / 60
    if dry_run:
        for name, content in blocks.items():
            print(f"--- {name}\n{content}\n")
        return
    # the pages as they are now, not as they were when the run began (a run takes minutes: the prose may have been
    # edited meanwhile); a page none of whose parts changed is left alone
    texts = {page: page.read_text(encoding="utf-8") for page in texts}
    for page, text in write_parts(texts, blocks, command).items():
        if fix_line_links(text) != texts[page]:
            write_atomically(page, fix_line_links(text))
    print(f"wrote {', '.join(map(str, texts))} ({', '.join(blocks)}) in {minutes:.1f} minutes")


NOT_IN_THE_COMMAND = ("pages", "img_dir", "models_dir", "dry_run")  # where a run writes and reads, not what it measures


def remake_command(given):
    """The command a part's marks record: this script with each flag `given` a value other than its default
    (`main`'s arguments as they came), so that a part made with --llama_repeats 9 says so."""
    defaults = {name: parameter.default for name, parameter in inspect.signature(main).parameters.items()}
    flags = []
    for name in sorted(defaults, key=lambda name: name != "only"):  # --only first (what was made), then main's order
        value = given[name]
        if name in NOT_IN_THE_COMMAND or str(value) == str(defaults[name]):
            continue
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)  # fire's 1,2 as given
        flags.append(f"--{name}" if value is True else f"--no{name}" if value is False else
                     f"--{name} {shlex.quote(text)}")
    return " ".join(["python tools/make_readme_figures.py"] + flags)


def main(random_weights=False, draft_model_size="124M", target_model_size="355M", Ks=KS, alpha=ALPHA,
         n_tokens_to_generate=12, repeats=3, prefix_length=32, seed=0, pages=PAGES, img_dir="img",
         models_dir="models", dry_run=False, sample_run_tokens=40, drafters="model,lookup,staged",
         drafter_Ks=(4, "auto"), trees="2,1,1", sample_run_sizes=("124M", "355M"), exactness=True,
         forward_sizes=FORWARD_SIZES, forward_no_cache_sizes="124M", forward_repeats=7, forward_n_new=32,
         forward_breakdown_rounds=15, forward_r_repeats=5, forward_context_size="124M",
         forward_context_lengths=CONTEXT_LENGTHS, forward_context_rounds=6, peer_sizes="124M,355M",
         loading_sizes="124M,1558M", loading_repeats=2, text_repeats=3, llama_repeats=5, timings=True, agreement=True,
         grading_submissions=40, only=None):
    """Regenerate the numbers, tables and plots of README.md and docs/BENCHMARKS.md (see the module docstring) from one run.

    Args:
        random_weights: random weights of the real shapes (costs only; alpha means nothing) instead of OpenAI's.
        draft_model_size: the draft of the cost table's pair (a size or a folder).
        target_model_size: the target of the cost table's pair (a size or a folder).
        Ks: the lookaheads of the cost table.
        alpha: the ONE acceptance rate the cost table predicts at.
        n_tokens_to_generate: as in tools/benchmark.py.
        repeats: as in tools/benchmark.py.
        prefix_length: as in tools/benchmark.py.
        seed: as in tools/benchmark.py.
        pages: the files to write into (each part goes where its marks are).
        img_dir: where the plots go.
        models_dir: where released sizes are found or downloaded to.
        dry_run: print the generated parts instead of writing them.
        sample_run_tokens: tokens of the sample run (random weights only).
        drafters: the drafter comparison, as in tools/benchmark.py ("" for none).
        drafter_Ks: the drafters' K, as in tools/benchmark.py.
        trees: the tree comparison, as in tools/benchmark.py ("" for none).
        sample_run_sizes: the draft and target shapes of the sample run (random weights only).
        exactness: False leaves the exactness table as it is (it takes the statistical test's ~10 s).
        forward_sizes: benchmark_forward.py's --sizes (all four: some minutes on a quiet 2-core machine, much
            longer on a busy one; "" leaves the forward pass's table as it is).
        forward_no_cache_sizes: benchmark_forward.py's --no_cache_sizes.
        forward_repeats: benchmark_forward.py's --repeats.
        forward_n_new: benchmark_forward.py's --n_new.
        forward_breakdown_rounds: benchmark_forward.py's --breakdown_rounds.
        forward_r_repeats: benchmark_forward.py's --r_repeats.
        forward_context_size: benchmark_forward.py's --context_size (None leaves the context's parts as they are).
        forward_context_lengths: benchmark_forward.py's --context_lengths.
        forward_context_rounds: benchmark_forward.py's --context_rounds.
        peer_sizes: the sizes Hugging Face transformers decodes for scale, when torch and transformers are
            installed (of those benchmark_forward.py measured).
        loading_sizes: tools/measure_loading.py's --sizes ("": leave the loading table as it is).
        loading_repeats: tools/measure_loading.py's --repeats.
        text_repeats: tools/benchmark_text.py's --repeats (prompt lookup on real text; 0 leaves its table as it
            is).
        llama_repeats: tools/compare_llama_cpp.py's --repeats (llama.cpp on the same weights, when llama-cpp-python
            and gguf are installed; else the part says it was skipped); 0 leaves its table as it is.
        timings: False leaves the small timings (prompt lookup, the BPE, the sampler, gpt2.py's details) as
            they are.
        agreement: False leaves the agreement with the peers (HF's logits, tiktoken's Unicode) as it is.
        grading_submissions: tools/time_grading.py's --submissions (a class of reference submissions through the
            gradebook; 0 leaves its table as it is).
        only: some of the small parts alone, comma-separated (of SMALL_PARTS: lookup-timing, bpe-timing,
            sampler-timing, design-timing, pass-timing, hf-agreement, unicode-count; or text-benchmark, llama-cpp,
            grading-time, which take some minutes, page-size (the rounds' page and its screenshot), or
            sample-run: main.py on random weights, as --random_weights runs it), each marked as measured alone.
    """
    given = dict(locals())  # main's arguments as they came, for the command the marks record
    started = time.time()
    tokenizer_dir = release_files.models_dir() / "124M"  # $GPT2_MODELS_DIR, else models/: OpenAI's 124M files

    with errors_as_one_line():  # every flag before any part runs: one line `error: ...`, exit code 2
        Ks = as_whole_numbers(Ks, "--Ks")
        as_fractions(alpha, "--alpha")
        for flag, value, minimum in (
                ("--n_tokens_to_generate", n_tokens_to_generate, 1), ("--repeats", repeats, 1),
                ("--prefix_length", prefix_length, 1), ("--seed", seed, 0), ("--sample_run_tokens", sample_run_tokens, 1),
                ("--forward_repeats", forward_repeats, 1), ("--forward_n_new", forward_n_new, 1),
                ("--forward_breakdown_rounds", forward_breakdown_rounds, 1), ("--forward_r_repeats", forward_r_repeats, 1),
                ("--forward_context_rounds", forward_context_rounds, 1), ("--loading_repeats", loading_repeats, 1),
                ("--text_repeats", text_repeats, 0), ("--llama_repeats", llama_repeats, 0),
                ("--grading_submissions", grading_submissions, 0)):
            as_whole_number(value, flag, minimum)
        for flag, value in (("--random_weights", random_weights), ("--dry_run", dry_run), ("--exactness", exactness),
                            ("--timings", timings), ("--agreement", agreement)):
            as_bool(value, flag)
        for flag, value in (("--forward_sizes", forward_sizes), ("--forward_no_cache_sizes", forward_no_cache_sizes),
                            ("--peer_sizes", peer_sizes), ("--loading_sizes", loading_sizes)):
            for size in as_names(value, flag, allow_empty=True):
                benchmark_forward.size_hparams(size)  # an unknown size stops the run here, not in its part
        forward_context_size = as_optional(forward_context_size, as_text, "--forward_context_size") or None
        if forward_context_size:
            benchmark_forward.size_hparams(forward_context_size)
        context_lengths = as_whole_numbers(forward_context_lengths, "--forward_context_lengths")
        try:  # the forward pass's tokens fit its sizes' contexts: said now, not minutes into the run
            benchmark_forward.check_fits(as_names(forward_sizes, "--forward_sizes", allow_empty=True),
                                         forward_context_size, context_lengths, n_new=int(forward_n_new))
        except ValueError as error:  # in this script's names; --n_prompt and --context_steps are benchmark_forward's
            raise ValueError(str(error).replace("--n_new", "--forward_n_new").replace(
                "--context_lengths", "--forward_context_lengths")) from None
        if random_weights or (only is not None and "sample-run" in as_names(only, "--only")):
            sample_run_sizes = checked_sample_sizes(sample_run_sizes)  # --only sample-run runs it alone
        if random_weights:  # the shapes of the cost table's pair
            for size in [draft_model_size, target_model_size]:
                benchmark.hparams_of(size)
        else:
            check_model_names(draft_model_size, target_model_size)
        benchmark.comparison_flags(drafters or None, drafter_Ks, trees or None, None)
        check_models_dir(as_text(models_dir, "--models_dir"))
        check_output_folder(img_dir, "--img_dir")
        texts = {}
        for page in as_names(pages, "--pages"):
            if not (REPO / page).is_file():
                raise ValueError(f"{REPO / page} does not exist: --pages names the files that hold the marks")
            texts[REPO / page] = (REPO / page).read_text(encoding="utf-8")
        if only is not None:
            names = as_names(only, "--only")
            alone = {**SMALL_PARTS, "text-benchmark": lambda forward, tokenizer: text_benchmark_block(text_repeats),
                     "llama-cpp": lambda forward, tokenizer: llama_cpp_block(llama_repeats),
                     "grading-time": lambda forward, tokenizer: grading_block(grading_submissions),
                     "page-size": lambda forward, tokenizer: rounds_page(tokenizer, img_dir, dry_run),
                     "sample-run": lambda forward, tokenizer: sample_run(
                         seed + SAMPLE_RUN_SEED, tokenizer, sample_run_tokens, sample_run_sizes)}
            unknown = [name for name in names if name not in alone]
            if unknown:
                raise ValueError(f"--only takes some of {', '.join(alone)}; got {', '.join(unknown)}")
            counts = {"text-benchmark": ("--text_repeats", text_repeats),  # 0 in a full run: "leave the part"
                      "llama-cpp": ("--llama_repeats", llama_repeats),
                      "grading-time": ("--grading_submissions", grading_submissions)}
            for name, (flag, value) in counts.items():
                if name in names and int(value) == 0:
                    raise ValueError(f"--only {name} remakes that part, and {flag} 0 would measure nothing (in a full "
                                     f"run it leaves the part as it is): give {flag} 1 or more, or leave it out")
    command = remake_command({**given, "only": ",".join(names)} if only is not None else given)
    if only is not None:
        note = (f"(Measured alone, not in the run the other numbers come from: `{command}` on "
                f"{machine_description()}, {time.strftime('%Y-%m-%d', time.gmtime())}.)")
        blocks = {block_name(name): alone[name]({"results": []}, tokenizer_dir) + "\n\n" + wrap(note)
                  for name in names}
        return write_or_print(texts, with_kinds_table(blocks, texts, "\n\n" + wrap(note)), command, dry_run, started)
    blocks = {}

    blocks["worked-round"] = "```text\n" + worked_round.report(worked_round.worked_rounds()) + "\n```"
    if exactness:
        blocks["exactness-table"] = exactness_table()
    if not dry_run:
        worked_round.main(out=img_dir)

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):  # tools/benchmark.py's own tables: the README gets markdown instead
        results = benchmark.run(draft_model_size=draft_model_size, target_model_size=target_model_size, Ks=Ks,
                                n_tokens_to_generate=n_tokens_to_generate, seed=seed, random_weights=random_weights,
                                alphas=sorted({*benchmark.DEFAULT_ALPHAS, alpha}), prefix_length=prefix_length, repeats=repeats,
                                 models_dir=models_dir, img_dir=img_dir if not dry_run else tempfile.mkdtemp(),
                                drafters=drafters or None, drafter_Ks=drafter_Ks, trees=trees or None)
    names = benchmark.model_name(draft_model_size), benchmark.model_name(target_model_size)
    costs_by_mode = sorted(results["costs"], key=lambda costs: not costs.kv_cache)
    blocks["cost-table"] = cost_table(costs_by_mode, Ks, alpha)
    blocks["cost-summary"] = cost_summary(costs_by_mode, Ks, alpha, names)
    if results["drafter_rows"]:
        blocks["drafter-table"] = benchmark.format_table(results["drafter_rows"], markdown=True)
        blocks["drafter-summary"] = drafter_summary(results["drafter_rows"])
    if results["tree_rows"]:
        blocks["tree-table"] = benchmark.format_table(results["tree_rows"], markdown=True)

    if random_weights:
        blocks["sample-run"] = sample_run(seed + SAMPLE_RUN_SEED, tokenizer_dir, sample_run_tokens, sample_run_sizes)
    blocks["break-even-table"] = break_even_table()
    blocks["page-size"] = rounds_page(tokenizer_dir, img_dir, dry_run)

    forward = {"results": [], "contexts": {}, "runs": []}
    forward_sizes = ",".join(benchmark_forward.parse_list(forward_sizes)) if forward_sizes else ""
    if forward_sizes or forward_context_size:
        settings = {"repeats": forward_repeats, "n_new": forward_n_new, "breakdown_rounds": forward_breakdown_rounds,
                    "r_repeats": forward_r_repeats, "context_rounds": forward_context_rounds}
        no_cache = ",".join(benchmark_forward.parse_list(forward_no_cache_sizes)) if forward_no_cache_sizes else ""
        lengths = ",".join(map(str, benchmark_forward.parse_list(forward_context_lengths, int)))
        forward = measure_forward(forward_sizes, no_cache, forward_context_size, lengths, settings)
        blocks.update(forward_blocks(forward, forward_breakdown_rounds))
        if forward["results"]:
            n_prompt = forward["runs"][0][1]["settings"]["n_prompt"]
            blocks["peer-speed"] = peer_block(forward, benchmark_forward.parse_list(peer_sizes),
                                              {"n_prompt": n_prompt, "n_new": forward_n_new})
        if not dry_run:
            plot_forward(forward, img_dir)
    if loading_sizes:
        with tempfile.TemporaryDirectory() as tmp:
            loads = run_json_script(["tools/measure_loading.py", "--sizes",
                                     ",".join(benchmark_forward.parse_list(loading_sizes)), "--repeats",
                                     loading_repeats, "--folder", Path(tmp) / "gpt2-load"])["loads"]
        blocks["loading-table"] = loading_table(loads)
    if text_repeats:
        blocks[block_name("text-benchmark")] = text_benchmark_block(text_repeats)
    if llama_repeats:
        blocks[block_name("llama-cpp")] = llama_cpp_block(llama_repeats)
    if grading_submissions:
        blocks["grading-time"] = grading_block(grading_submissions)
    for name, part in SMALL_PARTS.items():
        if timings if name.endswith("-timing") else agreement:
            blocks[block_name(name)] = part(forward, tokenizer_dir)

    minutes = (time.time() - started) / 60
    blocks["machine"] = (f"Made by `{command}` in {minutes:.1f} minutes on {machine_description()}, "
                         f"{blas_description()} ({forward_tables.threads_label(blas_threads())} by default), "
                         f"{time.strftime('%Y-%m-%d', time.gmtime())}; "
                         f"{'random weights of the real shapes' if random_weights else 'OpenAI weights'}; "
                         f"the {KINDS[machine_kind()]} kind of machine (tools/machine.py).")
    return write_or_print(texts, with_kinds_table(blocks, texts), command, dry_run, started)


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/make_readme_figures.py")
