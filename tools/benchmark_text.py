"""Prompt lookup on real text: how much faster does it write prose, code, a rewrite with edits, a quoted answer?

Read drafters.py (PromptLookup), lookahead.py (AutoK) and speed/calibration.py first. A benchmark on random weights
cannot say how often prompt lookup's guesses are kept: a random model's text is not a real one. Here the
target is a model function that pays for a real cached forward pass of GPT-2's shapes (random weights, 124M
by default: create_model_fn, the KV cache on), throws its answer away, and says that the next token is the
real text's next token, with certainty. So decoding at temperature 0 writes the text, the guesses are kept
exactly when the real text continues as they say, and the time is that of a real 124M-shaped model.

The texts ship in tools/texts/ (written for this project): NAME.txt holds a prompt, a line `=== output ===`,
and the output the target writes. prose (an essay continued), code (a module continued), rewrite (a 29-line
function given back with two names changed and two lines added), quotes (an answer quoting meeting notes in
short phrases), excerpts (an answer that gives back five clauses of a tenancy agreement word for word).
They are tokenized with GPT-2's BPE from $GPT2_MODELS_DIR/124M (encoder.json, vocab.bpe) when it is there,
else byte by byte.

For each text, in turns (so that a burst of load on a shared machine hits every row alike), --repeats times:
autoregressive decoding, then speculative sampling with prompt lookup (the longest match) for each --Ks (whole
numbers, and "auto": lookahead.AutoK), and the original lookup (max_ngram=3) with K=auto for comparison. The
K=auto rows run first, right after the autoregressive run they are compared with: a machine's speed can drift
within minutes, and the goals are K=auto's (the table keeps the order of --Ks). Each
run gets a fresh model (an empty cache) and is timed in two parts: the prompt pass (prefill: model(prompt, 1))
and the decoding after it. Before each text's runs, in every repeat, calibration.calibrate measures r(m) and o
anew (untimed; the routes chosen at the first, then kept), and that turn's K=auto plans with them, as main.py
plans with a calibration made just before its run: r(m) moves with the machine's memory speed (faster memory
shortens a one-position pass more than a many-position one), so a calibration made minutes before a run can plan
it with another moment's r(m). --r_table plans every run with one costs file instead. Reported per text and row:
- tokens per target pass (the median over the repeats), mean k (the lookahead of each round, 0 for a plain step);
- alpha by match length: the share of checked guesses kept, by the match their path had reached (the
  proposal's match n plus the guesses kept before it: the same buckets as AutoK's);
- speedup over autoregressive decoding in the same repeat, end to end (prefill + decoding) and decoding only:
  the median over the repeats, and their range; and decoding only by the cost model (the tokens over the
  rounds' sum of r(m) as calibrated for the run: no clock, so no load on a shared machine in it; the median).

    python tools/benchmark_text.py                              # 124M shapes, 3 repeats (about 5 minutes)
    python tools/benchmark_text.py --texts rewrite --repeats 5  # one text
    python tools/benchmark_text.py --json text.json             # also write every measurement to a file
    python tools/benchmark_text.py --r_table models/124M/r_table.json   # plan with a saved r(m), no calibration

`markdown_table(from_json(data))` formats the table for the measured tables page.
"""

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's root: python tools/...

import speed.openblas_env  # noqa: E402,F401  before NumPy loads OpenBLAS, which reads its settings then

import numpy as np  # noqa: E402

from tools import benchmark, release_files  # noqa: E402
import drafters  # noqa: E402
from speed import calibration  # noqa: E402
from encoder import get_encoder  # noqa: E402
from loaders.random_weights import check_memory_for  # noqa: E402
from lookahead import MATCH_BUCKETS, match_bucket  # noqa: E402
from model_fn import create_model_fn  # noqa: E402
from loaders.safe_files import write_atomically  # noqa: E402
from records import SpeculativeStats  # noqa: E402
from sampling import autoregressive_sampling, speculative_sampling  # noqa: E402
from tools.machine import KINDS, machine_description, machine_kind  # noqa: E402
from command_line.flags import MAX_SEED, as_bool, as_text, as_whole_number, errors_as_one_line  # noqa: E402
from command_line.scripts import as_names, as_whole_numbers, check_output_file, run_script  # noqa: E402
from loaders.weights import read_small_file  # noqa: E402

TEXTS_DIR = Path(__file__).resolve().parent / "texts"
TEXT_NAMES = ("prose", "code", "rewrite", "quotes", "excerpts")
SEPARATOR = "\n=== output ===\n"
MAX_TEXT_BYTES = 1 << 20  # each text is a few KB: the prompt and the output fit in a context of 1,024 tokens
BUCKET_NAMES = [f"{low}" if high == low else f"{low}-{high}" if high else f"{low}+"
                for low, high in zip(MATCH_BUCKETS, [b - 1 for b in MATCH_BUCKETS[1:]] + [None])]  # 1, 2-3, .., 16+


@dataclass
class Text:
    name: str
    prompt: list  # token ids
    output: list  # token ids: what the target writes


@dataclass
class Run:
    """One timed run: the prompt pass and the decoding after it, in seconds, and what the decoding did."""

    prefill: float
    decode: float
    target_passes: int = 0
    ks: list = field(default_factory=list)
    sizes: list = field(default_factory=list)  # the tokens each round proposed (the target read one more)
    checked: list = field(default_factory=list)  # checked guesses by match bucket
    kept: list = field(default_factory=list)
    r_table: list = field(default_factory=list)  # the r(m) a lookup run planned with (r_table[m - 1] = r(m))
    calibrated_step_ms: float = 0.0  # the one-position pass of that calibration


# ------------------------------------------------------------------------------------------------------------
# The texts and the target that writes them
# ------------------------------------------------------------------------------------------------------------


BPE_NAME = "GPT-2's BPE"


def tokenizer(models_dir=None):
    """(encode, description): GPT-2's BPE from models_dir/124M if its files are there, else UTF-8 bytes."""
    models_dir = models_dir or release_files.models_dir()  # $GPT2_MODELS_DIR (unless empty), else models/
    if (Path(models_dir) / "124M" / "encoder.json").exists() and (Path(models_dir) / "124M" / "vocab.bpe").exists():
        return get_encoder("124M", models_dir).encode, BPE_NAME
    return (lambda text: list(text.encode("utf-8"))), "UTF-8 bytes (GPT-2's BPE files were not found)"


def check_fit(texts, n_ctx, tokenizer_name):
    """ValueError, in one line, for a text whose prompt and output do not fit in the model's n_ctx positions
    (as UTF-8 bytes, without GPT-2's BPE files, every text here is about twice as long as in tokens)."""
    for text in texts:
        if len(text.prompt) + len(text.output) > n_ctx:
            remedy = ("set GPT2_MODELS_DIR to a folder holding 124M/encoder.json and 124M/vocab.bpe"
                      if tokenizer_name != BPE_NAME else "shorten the text")
            raise ValueError(f"{text.name}: {len(text.prompt)} + {len(text.output)} tokens, as {tokenizer_name}, do "
                             f"not fit in n_ctx={n_ctx}: {remedy}")


def read_texts(names, encode, texts_dir=TEXTS_DIR):
    """The Texts called `names` (tools/texts/NAME.txt: the prompt, the separator line, the output), tokenized."""
    texts = []
    for name in names:
        path = Path(texts_dir) / f"{name}.txt"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in Path(texts_dir).glob("*.txt")))
            raise ValueError(f"no text called {name!r} in {texts_dir}: choose from {known}")
        try:
            text = read_small_file(path, MAX_TEXT_BYTES).decode("utf-8")
        except (OSError, ValueError) as error:  # a pipe, a device, too large, not UTF-8
            raise ValueError(f"{path} cannot be read as a text: {getattr(error, 'strerror', None) or error}") from None
        prompt, separator, output = text.partition(SEPARATOR)
        if not separator:
            raise ValueError(f"{path} has no line {SEPARATOR.strip()!r} between its prompt and its output")
        texts.append(Text(name, encode(prompt + "\n"), encode(output)))
    return texts


def text_target(model, text_ids):
    """A model function that runs `model` (a real forward pass, its cost paid) but answers with certainty that
    the next token is the text's: row i, after x[:len(x) - n + 1 + i], is one-hot at text_ids[len(x) - n + 1 + i].

    `model` must be a greedy create_model_fn (temperature 0): its one-hot rows are reused, each moved to the
    text's token, so the answer costs what the model's own does. Rows after a path that left the text (a
    rejected guess) are never read by the sampler; they point at the text's token at that position all the same.
    """
    last = len(text_ids) - 1

    def target(x, n=1, parents=None):
        rows = model(x, n) if parents is None else model(x, n, parents)  # [n, n_vocab], one-hot at the argmax
        positions = np.minimum(np.arange(len(x) - n + 1, len(x) + 1), last)  # [n]
        rows[np.arange(n), rows.argmax(axis=1)] = 0.0
        rows[np.arange(n), np.asarray(text_ids)[positions]] = 1.0
        return rows

    target.n_vocab, target.n_ctx, target.n_params = model.n_vocab, model.n_ctx, model.n_params
    return target


# ------------------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------------------


def timed_run(text, new_model, sample):
    """A Run: a fresh text target, its prompt pass timed, then sample(prompt, target) timed; the text is checked."""
    target = text_target(new_model(), text.prompt + text.output)
    start = time.perf_counter()
    target(text.prompt, 1)  # the prompt pass
    middle = time.perf_counter()
    ids, stats = sample(text.prompt, target)
    end = time.perf_counter()
    if ids[len(text.prompt) :] != text.output:  # temperature 0: the sampler must write the text
        raise SystemExit(f"{text.name}: the sampler did not write the text (a bug in the sampler or the drafter)")
    return Run(middle - start, end - middle)


def autoregressive_run(text, new_model):
    def sample(prompt, target):
        return autoregressive_sampling(prompt, target, len(text.output), np.random.default_rng(0)), None

    run = timed_run(text, new_model, sample)
    run.target_passes, run.ks = len(text.output), []
    return run


def lookup_run(text, new_model, K, max_ngram, costs):
    """A Run of speculative sampling with prompt lookup (max_ngram None: the longest match) and lookahead K, K=auto
    planning with `costs` (a calibration.MeasuredCosts)."""
    stats = SpeculativeStats()

    def sample(prompt, target):
        costs.use(target)  # K="auto" plans with the calibrated r(m)
        ids = speculative_sampling(prompt, drafters.prompt_lookup(max_ngram), target, len(text.output), K,
                                   np.random.default_rng(0), stats=stats)
        return ids, stats

    run = timed_run(text, new_model, sample)
    run.target_passes, run.ks = stats.target_passes, list(stats.ks)
    run.r_table, run.calibrated_step_ms = list(costs.r_table), float(costs.target_step_ms)
    run.sizes = [len(round_.proposal.tokens) for round_ in stats.round_log]
    run.checked, run.kept = [0] * len(MATCH_BUCKETS), [0] * len(MATCH_BUCKETS)
    for round_ in stats.round_log:
        for check in round_.checks:
            bucket = match_bucket(round_.proposal.match_length + check.depth - 1)
            run.checked[bucket] += 1
            run.kept[bucket] += int(check.kept)
    return run


def row_label(K, max_ngram):
    return f"lookup{'' if max_ngram is None else f' (max_ngram={max_ngram})'}, K={K}"


def measure(texts, params, hparams, Ks, repeats, costs, capped=True, progress=print, after_repeat=None):
    """{text name: {"autoregressive": [Run per repeat], row label: [Run per repeat]}}; after_repeat(results) is
    called after each repeat (the command line writes what it has so far). costs: a calibration.MeasuredCosts
    that every run plans with, or a function that measures them anew, called before each text's runs."""
    rows = [(K, None) for K in Ks] + ([("auto", 3)] if capped else [])

    def new_model():
        return create_model_fn(params, hparams, temperature=0)

    results = {text.name: {"autoregressive": []} | {row_label(*row): [] for row in rows} for text in texts}
    in_turn = sorted(rows, key=lambda row: row[0] != "auto")  # K=auto's first, next to their reference (see above)
    for repeat in range(repeats):
        for text in texts:
            progress(f"repeat {repeat + 1} of {repeats}: {text.name}")
            costs_now = costs() if callable(costs) else costs  # this turn's r(m): measured now, untimed
            results[text.name]["autoregressive"].append(autoregressive_run(text, new_model))
            for K, max_ngram in in_turn:
                results[text.name][row_label(K, max_ngram)].append(
                    lookup_run(text, new_model, K, max_ngram, costs_now))
        if after_repeat is not None:
            after_repeat(results)
    return results


# ------------------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------------------


def speedups(base_runs, runs, end_to_end):
    """[per repeat]: the autoregressive run's time over this row's, end to end or decoding only."""
    def seconds(run):
        return run.prefill + run.decode if end_to_end else run.decode

    return [seconds(base) / seconds(run) for base, run in zip(base_runs, runs)]


def spread(values):
    """'1.83x (1.79-1.90)': the median and the range."""
    return f"{np.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def modelled_speedup(n_tokens, sizes, r_table):
    """Decoding only, by the cost model: n_tokens one-position steps over the rounds' sum of r(m), m = proposed
    tokens + 1 (r_table[m - 1] = r(m), its last entry for larger m). No clock: what the plan is worth if
    r(m) holds, free of the load on a shared machine."""
    return n_tokens / sum(r_table[min(size + 1, len(r_table)) - 1] for size in sizes)


def table_rows(results, r_table=None):
    """The table's rows of strings, header first. r_table (the costs planned with, where a run does not keep its
    own): a column of the speedup by the cost model (modelled_speedup). A row's counts are its runs' together:
    K=auto's rounds can differ between repeats, each planned with the r(m) of its own calibration."""
    header = ["text", "row", "tokens/pass", "mean k", "alpha by match " + ", ".join(BUCKET_NAMES),
              "speedup end to end", "decoding only"] + (["by the cost model"] if r_table else [])
    rows = [header]
    for name, by_row in results.items():
        base = by_row["autoregressive"]
        ms = np.median([run.decode for run in base]) / base[0].target_passes * 1000
        rows.append([name, f"autoregressive ({ms:.1f} ms/token, prefill {np.median([r.prefill for r in base]):.2f} s)",
                     "1.00", "-", "-", "1.00x", "1.00x"] + (["1.00x"] if r_table else []))
        n_tokens = base[0].target_passes
        for label, runs in by_row.items():
            if label == "autoregressive":
                continue
            kept, checked = np.sum([run.kept for run in runs], axis=0), np.sum([run.checked for run in runs], axis=0)
            alphas = ", ".join(f"{k / c:.2f}" if c else "-" for k, c in zip(kept, checked))
            modelled = [modelled_speedup(n_tokens, run.sizes, run.r_table or r_table) for run in runs]
            rows.append([name, label, f"{n_tokens / np.median([run.target_passes for run in runs]):.2f}",
                         f"{np.mean([k for run in runs for k in run.ks]):.1f}", alphas,
                         spread(speedups(base, runs, True)), spread(speedups(base, runs, False))]
                        + ([f"{np.median(modelled):.2f}x"] if r_table else []))
    return rows


UNPREDICTABLE = 1.1  # tokens per pass at K = 16 under which prompt lookup cannot predict a text
QUOTE_HEAVY = 4.0  # tokens per pass at K = 16 from which an answer is quote-heavy
GOALS = {"unpredictable": 0.97, "quote-heavy": 2.0, "rewrite": {"avx512": 3.5, "avx512-amd": 3.5, "avx2": 3.0}}  # K=auto, end to end


def goal_lines(results, kind):
    """A sentence per text that has a goal (GOALS: by the tokens per pass at K = 16, which count tokens, not
    seconds; the rewrite's by the machine kind): K = auto's median speedup end to end against it, met or missed."""
    lines = []
    for name, by_row in results.items():
        base, k16, auto = (by_row.get(label) for label in ("autoregressive", row_label(16, None),
                                                           row_label("auto", None)))
        if not (base and k16 and auto):
            continue
        per_pass = base[0].target_passes / k16[0].target_passes
        if name == "rewrite":
            what, goal = f"the rewrite, on an {KINDS[kind]} machine", GOALS["rewrite"][kind]
        elif per_pass < UNPREDICTABLE:
            what, goal = "lookup cannot predict it", GOALS["unpredictable"]
        elif per_pass >= QUOTE_HEAVY:
            what, goal = "quote-heavy", GOALS["quote-heavy"]
        else:
            continue
        speedup = float(np.median(speedups(base, auto, True)))
        verdict = "met" if round(speedup, 2) >= goal else f"missed by {goal - round(speedup, 2):.2f}"
        lines.append(f"{name} ({per_pass:.2f} tokens per pass at K = 16: {what}): K = auto {speedup:.2f}x end to "
                     f"end, the goal at least {goal:.2f}x: {verdict}.")
    return lines


def markdown_table(data):
    """The results (from_json(data) or measure's) as a markdown table, with a line on how they were measured and
    the goals (goal_lines) of the machine kind they were measured on."""
    results, info = (from_json(data) if isinstance(data, dict) and "results" in data else (data, {}))
    lines = [benchmark.format_table(table_rows(results, info.get("costs", {}).get("r_table")), markdown=True)]
    if info:
        repeats = len(next(iter(results.values()))["autoregressive"])
        calibrations = calibrations_text(results)
        lines.append(f"\n{info.get('model', '')} on {info.get('machine', 'an unknown machine')}; "
                     f"{repeats} repeats (median and range); {calibrations}r(m) as calibrated"
                     f"{' first' if calibrations else ''}: {info.get('costs_summary', '')}")
    goals = goal_lines(results, info.get("kind") or machine_kind())
    if goals:
        lines.append("\nGoals: " + " ".join(goals))
    return "\n".join(lines)


def calibrations_text(results):
    """'r(m) calibrated before each text's runs, 15 times (a 1-position target pass 11.2-13.9 ms); ' where the
    lookup runs planned with more than one calibration, else ''."""
    steps = sorted({run.calibrated_step_ms for by_row in results.values() for label, runs in by_row.items()
                    if label != "autoregressive" for run in runs if run.calibrated_step_ms})
    if len(steps) < 2:
        return ""
    turns = len(results) * len(next(iter(results.values()))["autoregressive"])
    return (f"r(m) calibrated before each text's runs, {turns} times (a 1-position target pass "
            f"{steps[0]:.1f}-{steps[-1]:.1f} ms); ")


def to_json(results, info):
    return {"info": info, "results": {name: {label: [asdict(run) for run in runs] for label, runs in by_row.items()}
                                      for name, by_row in results.items()}}


def write_json(path, data):
    """data into the file path, as JSON text (a function of its own: main's flag --json hides the module)."""
    write_atomically(path, json.dumps(data, indent=1) + "\n")


def from_json(data):
    """(results, info) from what to_json made."""
    results = {name: {label: [Run(**run) for run in runs] for label, runs in by_row.items()}
               for name, by_row in data["results"].items()}
    return results, data.get("info", {})


# ------------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------------


def run(texts=TEXT_NAMES, Ks=(4, 8, 16, "auto"), size="124M", repeats=3, capped=True, r_table=None,
        calibrate_repeats=5, models_dir=None, hparams=None, max_tokens=None, seed=0, progress=print,
        after_repeat=None):
    """Measure and return (results, info): see the module docstring. hparams (a dict) overrides size's shapes and
    max_tokens cuts each prompt and output to that many tokens (the tests run a tiny model this way)."""
    encode, tokenizer_name = tokenizer(models_dir)
    texts = read_texts(texts, encode)
    if max_tokens:
        texts = [Text(t.name, t.prompt[-max_tokens:], t.output[:max_tokens]) for t in texts]
    hparams = dict(hparams or benchmark.hparams_of(size))
    params = benchmark.measured_random_params(hparams, np.random.default_rng(seed))
    check_fit(texts, hparams["n_ctx"], tokenizer_name)
    if r_table is not None:
        costs = plan = calibration.load_costs(r_table)  # every run plans with the file's costs
    else:
        progress("calibrating r(m) (not timed)")
        warm_up = create_model_fn(params, hparams, temperature=0)  # calibrated, never timed
        costs = calibration.calibrate(warm_up, repeats=calibrate_repeats)  # the routes chosen here, then kept
        first = [costs]

        def anew():  # before each text's runs: the first calibration's costs once, then measured again
            return first.pop() if first else calibration.calibrate(warm_up, repeats=calibrate_repeats,
                                                                      routes=costs.routes)
        plan = anew
    progress(costs.summary())
    info = {"model": f"{size} shapes ({hparams['n_layer']} layers, {hparams['n_embd']} wide), random weights, the "
                     f"KV cache on; {tokenizer_name}",
            "machine": machine_description(), "kind": machine_kind(), "repeats": repeats, "costs": asdict(costs),
            "costs_summary": costs.summary(), "texts": {t.name: [len(t.prompt), len(t.output)] for t in texts}}
    results = measure(texts, params, hparams, list(Ks), repeats, plan, capped, progress,
                      after_repeat and (lambda results: after_repeat(results, info)))
    return results, info


def main(texts="prose,code,rewrite,quotes,excerpts", Ks="4,8,16,auto", size="124M", repeats=3, capped=True,
         r_table=None, calibrate_repeats=5, json=None, seed=0):
    """Run the benchmark and print its table (see the module docstring).

    Args:
        texts: comma-separated names of tools/texts/*.txt.
        Ks: the lookahead of each lookup row: whole numbers and "auto".
        size: the shapes of the target (124M, 355M, 774M, 1558M, or a model folder); random weights.
        repeats: how many times each run is made (in turns); the table shows medians and ranges.
        capped: also run the original lookup (max_ngram=3) with K=auto, for comparison.
        r_table: a costs file (calibration.save_costs) to plan every run with, instead of calibrating.
        calibrate_repeats: how many times each r(m) is timed in each calibration (one before each text's runs).
        json: also write the results to this JSON file (--json text.json).
        seed: the random weights' seed.
    """
    with errors_as_one_line():  # every flag before any work: one line `error: ...`, exit code 2
        names = as_names(texts, "--texts")
        Ks = as_whole_numbers(Ks, "--Ks", 1, words=("auto",))
        repeats, calibrate_repeats = (as_whole_number(repeats, "--repeats", 1),
                                      as_whole_number(calibrate_repeats, "--calibrate_repeats", 1))
        capped, seed = as_bool(capped, "--capped"), as_whole_number(seed, "--seed", 0, MAX_SEED)
        check_memory_for([(size, benchmark.hparams_of(as_text(size, "--size")))])
        if r_table is not None:  # measured for this model and this machine, or refused (as main.py's --r_table)
            calibration.check_costs_fit(calibration.load_costs(as_text(r_table, "--r_table")), r_table, size)
        json = check_output_file(json, "--json")
        encode, tokenizer_name = tokenizer()  # the texts last: a missing tokenizer is their own error
        check_fit(read_texts(names, encode), benchmark.hparams_of(size)["n_ctx"], tokenizer_name)  # each fits

    def show(results, info):  # after each repeat: the table so far (and the file), in case the run is cut short
        print(f"\n{info['model']}\n{info['machine']}\n{calibrations_text(results)}{info['costs_summary']}\n",
              flush=True)
        print(benchmark.format_table(table_rows(results, info["costs"]["r_table"])), flush=True)
        if json:
            write_json(json, to_json(results, info))
            print(f"\nwrote {json}", flush=True)

    run(names, Ks, size, repeats, capped, r_table, calibrate_repeats, seed=seed, after_repeat=show)


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/benchmark_text.py")
