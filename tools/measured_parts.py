"""The parts measured by scripts run as processes of their own: the forward pass, Hugging Face for scale, loading,
prompt lookup on real text, llama.cpp, the gradebook's time.

Read tools/make_readme_figures.py first (it calls these), then the scripts they run: tools/benchmark_forward.py,
tools/measure_hf_speed.py, tools/measure_loading.py, tools/benchmark_text.py, tools/compare_llama_cpp.py and
tools/time_grading.py. Each runs as a process of its own, because OpenBLAS reads its thread count
(OPENBLAS_NUM_THREADS) once, when NumPy loads, a load's peak memory must be measured in a fresh process, and the
gradebook's time is a whole run's; most write what they measured with --json, and the functions here turn that
into docs/BENCHMARKS.md's tables and the sentences that read them.
"""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tools import benchmark_forward, benchmark_text, compare_llama_cpp, forward_tables
from tools.forward_tables import r_of_m
from tools.machine import KINDS
from tools.pages import REPO, bytes_text, ratio_text, sizes_text, span, wrap


# ------------------------------------------------------------------------------------------------------------
# Scripts run as processes of their own
# ------------------------------------------------------------------------------------------------------------


def shown_command(args, env=None):
    """The command as one would type it: shown_command(["tools/benchmark_forward.py", "--sizes", ""],
    {"OPENBLAS_NUM_THREADS": "1"}) == "OPENBLAS_NUM_THREADS=1 python tools/benchmark_forward.py --sizes ''"."""
    return " ".join([f"{name}={value}" for name, value in (env or {}).items()]
                    + ["python", shlex.join(str(arg) for arg in args)])


def run_json_script(args, env=None):
    """What `python *args --json FILE` writes into FILE, run in the repository as a process of its own (its
    output shows as it comes). A process of its own, because OpenBLAS reads OPENBLAS_NUM_THREADS once, when
    NumPy loads. A failure stops this run, naming the command."""
    print(f"\n$ {shown_command(args, env)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "measured.json"
        done = subprocess.run([sys.executable, *map(str, args), "--json", str(path)], cwd=REPO,
                              env={**os.environ, **(env or {})})
        if done.returncode != 0:
            raise SystemExit(f"`{shown_command(args, env)}` failed (exit status {done.returncode}); its output is "
                             f"above")
        return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------------------
# The speed of the forward pass: tools/benchmark_forward.py, twice
# ------------------------------------------------------------------------------------------------------------


FORWARD_SIZES = "124M,355M,774M,1558M"

CONTEXT_LENGTHS = "16,64,128,256,384,512,640,768,896,1000"

FLOOR_TARGET = 1.2  # the goal: a decoding step at most 1.2x the strict floor

CONTEXT_TARGET = 1.15  # the goal: a step at 1,000 tokens of context at most 1.15x the step at 16



def measure_forward(sizes, no_cache_sizes, context_size, context_lengths, settings):
    """benchmark_forward.py twice, each a process of its own: the sizes (and the context) with OpenBLAS's
    default threads, then the context alone with one thread.

    Returns {"results": [SizeResult], "contexts": {"2 threads": ContextResult, "1 thread": ...},
    "runs": [(the command as typed, the run's description from the JSON)]}.
    """
    flags = [word for name, value in settings.items() for word in (f"--{name}", value)]
    context = ["--context_size", context_size or "None", "--context_lengths", context_lengths]
    commands = [(["tools/benchmark_forward.py", "--sizes", sizes, "--no_cache_sizes", no_cache_sizes, *flags, *context,
                  "--img_dir", "None"], None)]
    if context_size:
        commands.append((["tools/benchmark_forward.py", "--sizes", "", "--no_cache_sizes", "", *context,
                          "--context_rounds", settings["context_rounds"], "--img_dir", "None"],
                         {"OPENBLAS_NUM_THREADS": "1"}))
    forward = {"results": [], "contexts": {}, "runs": []}
    for args, env in commands:
        results, context_result, run = benchmark_forward.from_json(run_json_script(args, env))
        forward["results"] += results
        if context_result is not None:
            label = forward_tables.threads_label(run["threads"])
            if label in forward["contexts"]:  # OPENBLAS_NUM_THREADS=1 was set for both runs
                label += f", run {len(forward['runs']) + 1}"
            forward["contexts"][label] = context_result
        forward["runs"].append((shown_command(args, env), run))
    return forward


def forward_run_text(forward):
    """The sentences that say how benchmark_forward.py ran: its commands, threads, minutes and load. A command
    run with an environment variable shows it apart (`python ...` with `NAME=value` in the environment), as
    bash's `NAME=value python ...` does not run in PowerShell."""
    lines = []
    for command, run in forward["runs"]:
        start, end = run["load_average"]
        settings, command = re.fullmatch(r"((?:\w+=\S+ )*)(.*)", command).groups()
        environment = f" with `{settings.strip()}` in the environment" if settings else ""
        lines.append(wrap(f"- OpenBLAS with {forward_tables.threads_label(run['threads'])}, {run['minutes']:.1f} "
                          f"minutes, load average {start:.2f} at the start and {end:.2f} at the end: "
                          f"`{command}`{environment}"))
    return "\n".join(lines)


def forward_summary(results):
    """The sentences that read the main table and the breakdown, with their numbers."""
    lines_of = dict(forward_tables.BREAKDOWN)
    rests = [tuple(lines_of[line](res.breakdown, res) for line in ("rest of the forward pass", "the same rest, alone"))
             for res in results]  # seconds of it in a step, and alone
    best = {res.size: min(res.sampler_steps) / res.floor for res in results}
    median = [float(np.median(res.sampler_steps)) / res.median_floor for res in results]
    met = [size for size, ratio in best.items() if ratio <= FLOOR_TARGET]
    products = [sum(lines_of[line](res.breakdown, res) for line in ("block matrix products", "LM head (x @ wte.T)"))
                / res.breakdown["sampler step"] for res in results]  # as the step makes them
    rates_of = dict(forward_tables.BREAKDOWN_RATES)
    product_rates, alone_rates = ([rates_of[f"GB/s: {part}{alone}"](res) for res in results
                                   for part in ("block products", "LM head")] for alone in ("", ", alone"))
    attention = [tuple(lines_of[line](res.breakdown, res) for line in ("attention over the cache", "attention, alone"))
                 for res in results]
    sampler_work = [res.breakdown["logits_to_probs"] + res.breakdown["_check_probs + _sample"] for res in results]
    share = max(work / res.breakdown["sampler step"] for work, res in zip(sampler_work, results))
    lines = [f"- The best runs are {ratio_text(list(best.values()))} the strict floor, the median runs "
             f"{ratio_text(median)} the median floor. The goal, at most {FLOOR_TARGET}× the strict floor, "
             + (f"is met for {sizes_text(met)}." if met else "is not met at any size."),
             f"- The matrix products (the blocks' and the LM head's) are "
             f"{span([100 * p for p in products], '{:.0f}')}% of a step and ran at "
             f"{span([r / 1e9 for r in product_rates], '{:.1f}')} GB/s in it, "
             f"{span([r / 1e9 for r in alone_rates], '{:.1f}')} GB/s back to back alone, against "
             f"{span([max(res.bandwidths) / 1e9 for res in results], '{:.1f}')} GB/s for the best single product.",
             f"- The attention over the cache takes {span([1e3 * in_step for in_step, _ in attention])} ms in a step, "
             f"{ratio_text([in_step / alone for in_step, alone in attention])} the same heads alone.",
             f"- The rest of the forward pass (the layer norms, GELU, additions, reshapes and Python's own work "
             f"between the products and the attention) takes {span([1e3 * in_step for in_step, _ in rests])} ms in a "
             f"step, {ratio_text([in_step / alone for in_step, alone in rests])} what the same work takes alone (the "
             f"step replayed, the answers of its products and attention taken from a record: no weight read).",
             f"- The sampler's own work at temperature 0 (`logits_to_probs`, `checks.check_probs`, `_sample`) takes "
             f"{span([1e3 * w for w in sampler_work])} ms, at most {share:.1%} of a step."]
    uncached = [res for res in results if res.no_cache]
    if uncached:
        lines.append("- Without the cache a step takes " + "; ".join(
            f"{ratio_text([res.no_cache / min(res.sampler_steps)], '{:.1f}')} the cached one for {res.size} "
            f"({ratio_text([res.picogpt / min(res.sampler_steps)], '{:.1f}')} in picoGPT's setting)"
            for res in uncached) + ".")
    return "\n".join(wrap(line) for line in lines)


def r_summary(results):
    """The sentence that reads the r(m) table."""
    r2 = [r_of_m(res.pass_seconds, statistic)[2] for res in results for statistic in (min, np.median)
          if 2 in res.pass_seconds]
    m_max = max(results[0].pass_seconds)
    r_last = [r_of_m(res.pass_seconds, statistic)[m_max] for res in results for statistic in (min, np.median)]
    return wrap(f"In this run r(2) is {span(r2)} and r({m_max}) is {span(r_last)} (bests and medians of "
                f"{sizes_text([res.size for res in results])}).") if r2 else ""


def context_summary(contexts):
    """The sentence that reads the context table: the ratio at the longest length, for each thread count."""
    ratios, met, missed = [], [], []
    for label, context in contexts.items():
        medians = forward_tables.context_medians(context)
        lengths = sorted(medians)
        ratio = medians[lengths[-1]] / medians[lengths[0]]
        ratios.append(f"{ratio:.3f}× with {label}")  # three decimals: 1.151 is above a goal of 1.15
        (met if ratio <= CONTEXT_TARGET else missed).append(label)
    text = (f"The median step at {lengths[-1]} tokens of context over the one at {lengths[0]}: "
            f"{', '.join(ratios)}. The goal is at most {CONTEXT_TARGET}×: ")
    if met and missed:
        return wrap(text + f"met with {' and '.join(met)}, not with {' or '.join(missed)}.")
    return wrap(text + (f"met with {' and '.join(met)}." if met else f"not met with {' or '.join(missed)}."))


def forward_blocks(forward, rounds):
    """The parts from tools/benchmark_forward.py's two runs (rounds: the breakdown's --breakdown_rounds)."""
    results, contexts = forward["results"], forward["contexts"]
    blocks = {"forward-run": forward_run_text(forward)}
    if results:
        blocks["forward-table"] = forward_tables.main_table(results, markdown=True)
        blocks["forward-breakdown"] = forward_tables.breakdown_table(results, markdown=True, rounds=rounds)
        blocks["forward-summary"] = forward_summary(results)
        blocks["r-table"] = forward_tables.r_table(results, markdown=True) + "\n\n" + r_summary(results)
    if contexts:
        blocks["context-table"] = (forward_tables.context_table_by_label(contexts, markdown=True) + "\n\n"
                                   + context_summary(contexts))
    return blocks


def plot_forward(forward, img_dir):
    """img_dir/forward_r_of_m.png and forward_ms_per_token_vs_context.png, from the measurements."""
    plt = benchmark_forward.import_pyplot()
    if plt is None:
        return
    if forward["results"]:
        forward_tables.plot_r_of_m(plt, forward["results"], Path(img_dir) / "forward_r_of_m.png")
    if forward["contexts"]:
        size = next(iter(forward["contexts"].values())).size
        floor = next((res.floor for res in forward["results"] if res.size == size), None)
        forward_tables.plot_context(plt, forward["contexts"], floor,
                                       Path(img_dir) / "forward_ms_per_token_vs_context.png")


# ------------------------------------------------------------------------------------------------------------
# For scale: Hugging Face transformers, when it is installed
# ------------------------------------------------------------------------------------------------------------


PEER_INSTALL = 'pip install "torch==2.13.0" transformers'  # quoted: the same command in PowerShell


def peer_installed():
    """True when torch and transformers can be imported here (tools/measure_hf_speed.py needs both)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))


def peer_block(forward, sizes, settings):
    """tools/measure_hf_speed.py (a process of its own) against this repository's best runs of the same sizes,
    prompt, tokens and threads; or one line saying it was skipped and how to include it."""
    if not peer_installed():
        return wrap(f"The comparison with Hugging Face `transformers` was skipped in this run: torch and "
                    f"transformers are not installed. To include it, `{PEER_INSTALL}` and run the command again.")
    ours = {res.size: min(res.sampler_steps) * 1e3 for res in forward["results"] if res.size in sizes}
    threads = forward["runs"][0][1]["threads"]
    peer = run_json_script(["tools/measure_hf_speed.py", "--sizes", ",".join(ours), "--n_prompt",
                            settings["n_prompt"], "--n_new", settings["n_new"], "--threads", threads])
    lines = [wrap(f"Hugging Face `transformers` {peer['transformers']} on torch {peer['torch']}, CPU, "
                  f"{forward_tables.threads_label(peer['threads'])}, greedy with its KV cache, {peer['n_new']} "
                  f"tokens after {peer['n_prompt']}, random weights of the same shapes, the best of {peer['repeats']} "
                  f"runs (`tools/measure_hf_speed.py`), right after this repository's runs above (their best):"), "",
             "| size | transformers, ms/token | this repository, ms/token | transformers / this repository |",
             "| --- | --- | --- | --- |"]
    for size, mine in ours.items():
        theirs = peer["ms_per_token"][size]
        lines.append(f"| {size} | {theirs:.1f} | {mine:.1f} | {theirs / mine:.2f}× |")
    return "\n".join(lines)


def llama_cpp_block(repeats):
    """tools/compare_llama_cpp.py (a process of its own, which starts one per thread count): llama.cpp beside this
    project on the same random 124M weights, 1 and 2 threads; or one line saying it was skipped and how to include
    it (llama-cpp-python and gguf are an optional extra)."""
    missing = compare_llama_cpp.missing_extras()
    if missing:
        return wrap(f"The comparison with llama.cpp was skipped in this run: {' and '.join(missing)} "
                    f"{'is' if len(missing) == 1 else 'are'} not installed. To include it, "
                    f"`{compare_llama_cpp.INSTALL}` and run the command again.")
    return compare_llama_cpp.markdown_report(run_json_script(["tools/compare_llama_cpp.py", "--repeats", repeats]))


def kinds_table(blocks):
    """Markdown for the README: per machine kind (tools/machine.KINDS), what its llama-cpp-KIND part of
    docs/BENCHMARKS.md measured ({kind: the part's text}; a kind with no such run yet says so): r(m) after 512
    cached tokens on 2 threads, this project's and llama.cpp's, and this project's decoding step over llama.cpp's
    on 1 and on 2 threads, as the part's first table has them; the processor and the day from its first
    paragraph."""
    lines = ["| machine kind | processor, day | r(2) / r(4) / r(8) / r(16), 2 threads: this project | llama.cpp | "
             "decoding step over llama.cpp's: 1 thread | 2 threads |", "|" + " --- |" * 6]
    for kind, name in KINDS.items():
        text = blocks.get(kind, "")
        rows = {(row[0], row[1]): row[2:] for row in (
            [cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| 1 thread") or line.startswith("| 2 threads"))}
        ours, theirs = rows.get(("2 threads", "this project")), rows.get(("2 threads", "llama.cpp"))
        one, two = (rows.get((threads, "this project / llama.cpp")) for threads in ("1 thread", "2 threads"))
        if not (ours and theirs and one and two):
            lines.append(f"| {name} | not measured yet | | | | |")
            continue
        processor = re.search(r"flash attention o(?:n|ff); (.+?), \d+ cores", " ".join(text.split()))
        day = re.search(r"\d{4}-\d\d-\d\d", text)
        lines.append(f"| {name} | {processor.group(1) if processor else '?'}, {day.group(0) if day else '?'} | "
                     f"{' / '.join(ours[2:])} | {' / '.join(theirs[2:])} | {one[0]} | {two[0]} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# Loading weights: tools/measure_loading.py
# ------------------------------------------------------------------------------------------------------------


LAYOUTS = {"TF checkpoint": "OpenAI's TF checkpoint", "HF safetensors": "Hugging Face safetensors"}

LOADING_MEMORY_GOAL = 1.15  # peak resident memory at most 1.15x the weights

LOADING_TIME_GOAL = 2.0  # a load at most 2x the time of reading the file's bytes



def loading_table(loads):
    """Markdown: one row per size and layout, then whether the two goals were met, and how far the time goal is
    from what copying the file into fresh memory alone takes (tools/measure_loading.py's fresh_copy)."""
    lines = ["| size | layout | weights | peak resident memory | × the weights | × above an empty Python | load | "
             "`cat` (warm) | load / `cat` | copy into fresh memory | copy / `cat` |", "|" + " --- |" * 11]
    memory_met, time_met = [], []
    for load in loads:
        weights, peak, seconds, cat, copy = (load[key] for key in ("weights", "peak", "seconds", "cat", "fresh_copy"))
        lines.append(f"| {load['size']} | {LAYOUTS.get(load['layout'], load['layout'])} | {bytes_text(weights)} | "
                     f"{bytes_text(peak)} | {peak / weights:.2f}× | {(peak - load['empty_python']) / weights:.2f}× | "
                     f"{seconds:.3g} s | {cat:.3g} s | {seconds / cat:.1f}× | {copy:.3g} s | {copy / cat:.1f}× |")
        memory_met.append(peak / weights <= LOADING_MEMORY_GOAL)
        time_met.append(seconds / cat <= LOADING_TIME_GOAL)
    copies = [load["fresh_copy"] / load["cat"] for load in loads]
    lines += ["", wrap(f"The memory goal (at most {LOADING_MEMORY_GOAL}× the weights) is met by {sum(memory_met)} "
                       f"of these {len(loads)} loads; the time goal (at most {LOADING_TIME_GOAL:g}× reading the file) "
                       f"by {sum(time_met)} of {len(loads)}. Copying the file's bytes into one fresh array, with no "
                       f"check and no reordering, took {span(copies, '{:.1f}')}× the `cat` by itself.")]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# Prompt lookup on real text (tools/benchmark_text.py)
# ------------------------------------------------------------------------------------------------------------


def text_benchmark_block(repeats):
    """tools/benchmark_text.py's table, measured as a process of its own with OpenBLAS's default threads: prompt
    lookup (fixed K and K="auto") on the texts of tools/texts/, against autoregressive decoding in the same
    repeat."""
    return benchmark_text.markdown_table(run_json_script(["tools/benchmark_text.py", "--repeats", repeats]))


def grading_block(submissions):
    """The README's grading-time part: tools/time_grading.py's table, run as a process of its own (the gradebook
    starts a child per step, and its time is the whole run's)."""
    done = subprocess.run([sys.executable, str(REPO / "tools" / "time_grading.py"), "--submissions", str(submissions)],
                          cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tools/time_grading.py failed (exit status {done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout.strip()
