"""Side by side with llama.cpp on the same weights: the same greedy tokens, then decode time and r(m) (a tool).

Read tools/benchmark_forward.py first (how this project times a step and r(m)), then tools/gguf_file.py (the
weights in llama.cpp's format). llama.cpp is the peer whose CPU kernels read each weight once however many
positions a pass has; nothing else in the project needs it. It takes two optional extras:

    pip install -r requirements/llama.txt     # llama-cpp-python built from source (llama.cpp, with cmake), gguf

    python tools/compare_llama_cpp.py                        # random 124M weights, 1 and 2 threads (minutes)
    python tools/compare_llama_cpp.py --threads 2 --repeats 9 --json llama.json --model models/124M

One run:
1. The weights: random ones of a released size's shapes (--model 124M, the default; --seed), or a model folder
   (utils.load_model). They are written as a float32 GGUF file (tools/gguf_file.py) into a temporary folder,
   or to --gguf FILE, which is kept (--reuse_gguf then reads it again instead of writing it).
2. For each thread count of --threads, a process of its own (OpenBLAS reads OPENBLAS_NUM_THREADS once, when
   NumPy loads; the process sets it) holds both implementations: this project's model function
   (create_model_fn at temperature 0) and llama.cpp through llama-cpp-python (n_threads and n_threads_batch
   the count, an F32 KV cache, flash attention as --flash_attn says), wrapped as a model function too
   (`llama_cpp_model`), so that the same sampler loop drives both. In it:
   - agreement: encoder.py and llama.cpp's tokenizer must give the same ids for --prompt; --n_check greedy
     tokens after it must be the same from both; the largest difference between the two logits at the
     prompt's last position is reported beside their spread.
   - per-token decode: --n_new greedy tokens (autoregressive_sampling, one 1-position pass each) after a
     context of --n_context tokens (the prompt, then tokens drawn with --seed); the tokens must agree again.
   - r(m) = the time of a pass over m new positions after the same --n_context cached ones (each model
     function rolls its cache back to them) over that of a 1-position pass, for m in --ms.
   Both are timed in turns (this project, llama.cpp, this project, ...) --repeats times, each turn after a
   pause in which the other's worker threads go to sleep (SETTLE_SECONDS); a time is the minimum over the
   repeats and r(m) a ratio of minimums, measured in the same process, this project's products on the routes
   speed/routes.py measured fastest in that process before the first turn (the report names them).
   - where this project's step goes: tools/benchmark_forward.step_breakdown (block products, LM head, attention,
     the rest, the sampler), beside llama.cpp's step; what the second core took off each part (`cores_text`).
3. The tables, in markdown (`markdown_report`), and with --json FILE every timing; tools/make_readme_figures.py
   runs this script with --json and puts `markdown_report` into docs/BENCHMARKS.md.

Both implementations pay for the same sampler work per step (logits_to_probs's one-hot row at temperature 0,
checks.check_probs, _sample: the breakdown prints it), and llama-cpp-python copies each pass's logits into a NumPy
array, as this project's pass returns one. Flags are checked before any work; a bad one is one line. If
a disagreement is found the tables still print, with it, and the exit status is 1.
"""

import importlib.util
import json as json_module
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python tools/...`: the repository's root

import speed.openblas_env  # noqa: E402,F401  before NumPy loads OpenBLAS, which reads its settings then

import numpy as np  # noqa: E402

from tools import benchmark  # noqa: E402
from command_line.flags import as_bool, as_text, as_typed_text, as_whole_number, check_writable, errors_as_one_line  # noqa: E402
from command_line.scripts import run_script  # noqa: E402
from gpt2 import gpt2  # noqa: E402
from loaders.download import HPARAMS  # noqa: E402
from records import timed  # noqa: E402
from model_fn import common_prefix_length, create_model_fn, logits_to_probs  # noqa: E402
from sampling import autoregressive_sampling  # noqa: E402
from speed import routes  # noqa: E402
from tools import benchmark_forward, forward_tables  # noqa: E402
from tools.benchmark_forward import parse_list  # noqa: E402
from tools.machine import KINDS, blas_description, blas_threads, load_average, machine_description  # noqa: E402
from tools.machine import SETTLE_SECONDS, machine_kind  # noqa: E402
from tools.gguf_file import gguf_name, write_gguf  # noqa: E402
from loaders.messages import shown  # noqa: E402
from tools.release_files import tokenizer_folder  # noqa: E402

OURS, THEIRS = "this project", "llama.cpp"
INSTALL = "pip install -r requirements/llama.txt"
PROMPT = "Alan Turing theorized that computers would one day become"  # main.py's
DEFAULTS = {"model": "124M", "threads": "1,2", "prompt": PROMPT, "n_check": "32", "n_context": "512", "n_new": "16",
            "ms": "1,2,4,8,16", "repeats": "5", "seed": "0", "flash_attn": "false", "gguf": None, "reuse_gguf": "false",
            "json": None}
DECODE_TARGET = 1.05  # the goal: a decoding step within 5% of llama.cpp's, on one thread and on two

# ------------------------------------------------------------------------------------------------------------
# The flags, checked before any work
# ------------------------------------------------------------------------------------------------------------


def whole_numbers(value, flag, minimum=1):
    """A comma-separated list of whole numbers >= minimum ("1,2" or 16), each checked as command_line/flags.py checks one."""
    items = parse_list(value, str)
    if not items:
        raise ValueError(f"{flag} needs at least one whole number, e.g. 1,2; got {shown(value)}")
    return [as_whole_number(item.strip(), flag, minimum) for item in items]


def model_hparams(model):
    """The shapes of --model: a released size (random weights of its shapes) or a model folder."""
    if model in HPARAMS or Path(model).is_dir():
        try:
            return benchmark.hparams_of(model)
        except ValueError:
            pass
    raise ValueError(f"--model must be one of {', '.join(HPARAMS)} (random weights of its shapes) or a model folder "
                     f"(hparams.json or config.json); got {shown(model)}")


def check_flags(args) -> dict:
    """The settings from the command line's text (a dict of DEFAULTS' keys), each checked:
    a ValueError naming the flag and what it takes. Nothing is loaded but the hyperparameters and the tokenizer."""
    args = dict(args)
    settings = {"model": as_text(args["model"], "--model"), "prompt": as_typed_text(args["prompt"], "--prompt"),
                "threads": whole_numbers(args["threads"], "--threads"),
                "ms": sorted(set(whole_numbers(args["ms"], "--ms")) | {1}),
                "flash_attn": as_bool(args["flash_attn"], "--flash_attn"),
                "reuse_gguf": as_bool(args["reuse_gguf"], "--reuse_gguf")}
    for name, minimum in (("n_check", 1), ("n_context", 1), ("n_new", 1), ("repeats", 1), ("seed", 0)):
        settings[name] = as_whole_number(args[name], f"--{name}", minimum)
    hparams = model_hparams(settings["model"])
    n_ctx, longest = hparams["n_ctx"], settings["n_context"] + max(max(settings["ms"]), settings["n_new"])
    if longest > n_ctx:
        raise ValueError(f"--n_context {settings['n_context']} + max(--n_new, --ms) = {longest} positions do not fit in "
                         f"the model's n_ctx = {n_ctx}: make --n_context smaller")
    for flag in ("gguf", "json"):
        settings[flag] = args[flag]
        if args[flag] is not None and not (flag == "gguf" and settings["reuse_gguf"]):
            check_writable(Path(as_text(args[flag], f"--{flag}")), f"--{flag}")
    if settings["reuse_gguf"] and (settings["gguf"] is None or not Path(settings["gguf"]).is_file()):
        raise ValueError(f"--reuse_gguf reads the GGUF file --gguf names, written by an earlier run; got --gguf "
                         f"{shown(settings['gguf'])}, which is not a file")
    if settings["reuse_gguf"] and "gguf" not in missing_extras():  # the file's weights: the ones this run makes
        held, wanted = gguf_name(settings["gguf"]), weights_name(settings)
        if held != wanted:
            raise ValueError(f"--gguf {shown(settings['gguf'])} holds {shown(held)}, and --model and --seed make "
                             f"{shown(wanted)}: give the ones it was written with, or leave out --reuse_gguf to "
                             f"write it anew")
    # the prompt last: it needs the tokenizer's files, whose absence is its own error
    prompt_ids = load_encoder(settings["model"]).encode(settings["prompt"])
    if not prompt_ids or len(prompt_ids) > settings["n_context"] or len(prompt_ids) + settings["n_check"] > n_ctx:
        raise ValueError(f"--prompt must be 1 to --n_context = {settings['n_context']} tokens, and leave room for "
                         f"--n_check = {settings['n_check']} more in n_ctx = {n_ctx}; it is {len(prompt_ids)} tokens")
    return settings


def missing_extras():
    """The optional extras this tool needs and this Python lacks: some of ["llama_cpp", "gguf"]."""
    return [name for name in ("llama_cpp", "gguf") if importlib.util.find_spec(name) is None]


# ------------------------------------------------------------------------------------------------------------
# The same weights, in both
# ------------------------------------------------------------------------------------------------------------


def load_encoder(model):
    """The tokenizer of --model: the folder's own, or OpenAI's (from $GPT2_MODELS_DIR/124M, else models/124M) for
    random weights, as tools/random_models.py finds it."""
    from encoder import get_encoder

    if model not in HPARAMS:
        return get_encoder(Path(model).name, str(Path(model).parent))
    folder = tokenizer_folder()
    return get_encoder(folder.name, str(folder.parent))


def weights_name(settings):
    """The name the GGUF file is written with, naming its weights: "124M, random, seed 0", or a folder's model."""
    name = benchmark.model_name(settings["model"])
    return f"{name}, random, seed {settings['seed']}" if settings["model"] in HPARAMS else name


def load_weights(model, seed):
    """(encoder, hparams, params): random weights of a released size's shapes from np.random.default_rng(seed),
    or a model folder's, as the project loads them."""
    if model in HPARAMS:
        params = benchmark.measured_random_params(HPARAMS[model], np.random.default_rng(seed))
        return load_encoder(model), HPARAMS[model], params
    from utils import load_model

    return load_model(model)


def open_llama(path, threads, n_ctx, flash_attn):
    """llama-cpp-python's Llama on the GGUF file: `threads` threads for one position and for many, a float32 KV
    cache, every position's logits kept (a verification pass needs all of its rows), no log lines."""
    from llama_cpp import GGML_TYPE_F32, Llama

    return Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads, n_threads_batch=threads,
                 type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, logits_all=True, flash_attn=flash_attn, verbose=False)


def llama_cpp_model(llm):
    """llama.cpp as this project's model function at temperature 0: model(x, n=1) -> probs [n, n_vocab], a
    one-hot row at each of the last n positions' argmax, as create_model_fn(..., temperature=0) returns.

    It keeps llama.cpp's one KV cache the way create_model_fn keeps its own: each call feeds x from the
    longest prefix it shares with the previous call's x, and at least its last n tokens (the rows asked for).
    llama-cpp-python's `eval` first drops the cached positions from `n_tokens` on, so setting n_tokens is the
    rollback. model.logits(x, n) gives the float32 logits [n, n_vocab] themselves; chains only (no trees).
    """
    cached = []

    def logits(x, n=1):
        nonlocal cached
        x = [int(token) for token in x]
        keep = min(common_prefix_length(cached, x), len(x) - n)
        llm.n_tokens = keep  # the rollback: positions keep .. are dropped by eval
        llm.eval(x[keep:])
        cached = x
        return llm.scores[len(x) - n : len(x)]  # [n, n_vocab]: a view of llama-cpp-python's logits

    def model(x, n=1, parents=None):
        if parents is not None:
            raise ValueError("llama_cpp_model scores chains only: parents must be None")
        return logits_to_probs(logits(x, n), temperature=0)  # [n, n_vocab] float64

    model.logits, model.n_vocab, model.n_ctx = logits, llm.n_vocab(), llm.n_ctx()
    model.tokenize = lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)  # its own BPE
    return model


def first_difference(a, b):
    """The first index where the token lists a and b differ (a shorter list differs where it ends), or None."""
    n = common_prefix_length(list(a), list(b))
    return None if n == len(a) == len(b) else n


# ------------------------------------------------------------------------------------------------------------
# Measuring, in one process with one thread count
# ------------------------------------------------------------------------------------------------------------


def turn(fn):
    """(what fn() returns, its wall time in seconds), after SETTLE_SECONDS for the other's threads to sleep."""
    time.sleep(SETTLE_SECONDS)
    return timed(fn)


def measure_here(settings, gguf_path, threads):
    """What one thread count's process measures (the module docstring's step 2), as JSON-ready data:
    {"threads", "blas_threads", "agreement", "decode": {name: [s/token]}, "passes": {name: {m: [s]}},
    "breakdown": {part: best seconds}} for name in OURS, THEIRS."""
    rng = np.random.default_rng(settings["seed"])
    encoder, hparams, params = load_weights(settings["model"], settings["seed"])
    ours = create_model_fn(params, hparams, temperature=0)
    theirs = llama_cpp_model(open_llama(gguf_path, threads, hparams["n_ctx"], settings["flash_attn"]))
    models = {OURS: ours, THEIRS: theirs}

    # agreement: the tokenizers, the logits after the prompt, and greedy tokens after it
    prompt_ids = encoder.encode(settings["prompt"])
    our_logits = gpt2(prompt_ids, **params, n_head=hparams["n_head"])[-1]  # [n_vocab]
    their_logits = np.array(theirs.logits(prompt_ids, 1)[-1])  # [n_vocab]
    greedy = {name: autoregressive_sampling(prompt_ids, model, settings["n_check"], rng)[len(prompt_ids):]
              for name, model in models.items()}
    agreement = {"prompt_tokens": len(prompt_ids), "n_check": settings["n_check"],
                 "tokenizer_difference": first_difference(prompt_ids, theirs.tokenize(settings["prompt"])),
                 "check_difference": first_difference(greedy[OURS], greedy[THEIRS]),
                 "max_logit_difference": float(np.max(np.abs(our_logits - their_logits))),
                 "logit_std": float(np.std(our_logits))}

    # timing, in turns: n_new greedy tokens after n_context, and an m-position pass after the same n_context
    n_context, n_vocab = settings["n_context"], hparams["n_vocab"]
    context = prompt_ids + rng.integers(0, n_vocab, n_context - len(prompt_ids)).tolist()
    tokens = context + rng.integers(0, n_vocab, max(settings["ms"])).tolist()
    decode, decoded = {name: [] for name in models}, {}
    passes = {name: {m: [] for m in settings["ms"]} for name in models}
    ours(context, 1)  # a pass for speed/routes.py to choose from, as main.py's warm-up pass
    chosen = routes.choose()  # this project's products take the routes measured fastest here (speed/routes.py)
    # then a model function made with them, as main.py's runs are (its cache in the memory the workers chosen want)
    models[OURS] = ours = create_model_fn(params, hparams, temperature=0)
    for model in models.values():
        model(context, 1)  # the context into the cache: not timed
    for repeat in range(settings["repeats"]):
        print(f"{forward_tables.threads_label(threads)}: repeat {repeat + 1} of {settings['repeats']}", file=sys.stderr,
              flush=True)  # progress on stderr: a process run by measure_in_process shows it, its report is not
        for name, model in models.items():
            ids, seconds = turn(lambda: autoregressive_sampling(context, model, settings["n_new"], rng))
            decode[name].append(seconds / settings["n_new"])
            decoded[name] = ids[n_context:]
        for m in settings["ms"]:
            for name, model in models.items():
                passes[name][m].append(turn(lambda: model(tokens[: n_context + m], m))[1])
    agreement["n_new"] = settings["n_new"]
    agreement["decode_difference"] = first_difference(decoded[OURS], decoded[THEIRS])
    breakdown = benchmark_forward.step_breakdown(ours, params, context + decoded[OURS], n_context,
                                                 settings["repeats"], rng, hparams["n_head"])
    return {"threads": threads, "blas_threads": blas_threads(), "agreement": agreement, "decode": decode,
            "passes": passes, "breakdown": breakdown, "routes": routes.text(chosen)}


def measure_in_process(settings, gguf_path, threads, folder):
    """measure_here's data from this script run as a process of its own with OPENBLAS_NUM_THREADS=threads (OpenBLAS
    reads it once, when NumPy loads), reading the GGUF file already written. Its progress and errors (stderr) show
    as they come; its report (stdout) is left out, since the report of all the thread counts follows."""
    out = Path(folder) / f"threads-{threads}.json"
    args = [sys.executable, __file__, "--threads", str(threads), "--gguf", str(gguf_path), "--reuse_gguf", "true",
            "--json", str(out)]
    for name in ("model", "prompt", "n_check", "n_context", "n_new", "repeats", "seed", "flash_attn"):
        args += [f"--{name}", str(settings[name])]
    args += ["--ms", ",".join(map(str, settings["ms"]))]
    print(f"{forward_tables.threads_label(threads)}: both implementations in a process of its own "
          f"(OPENBLAS_NUM_THREADS={threads})", flush=True)
    done = subprocess.run(args, env={**os.environ, "OPENBLAS_NUM_THREADS": str(threads)}, stdout=subprocess.DEVNULL)
    if not out.is_file():
        raise SystemExit(f"the process for {forward_tables.threads_label(threads)} failed (exit status "
                         f"{done.returncode}); its errors are above")
    return json_module.loads(out.read_text(encoding="utf-8"))["results"]


# ------------------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------------------


def pass_seconds(result, name):
    """{m: [seconds]} of one implementation's m-position passes (JSON made the m strings: ints again)."""
    return {int(m): times for m, times in result["passes"][name].items()}


def speed_rows(results):
    """[header, rows...]: per thread count, each implementation's decode (ms/token), 1-position pass (ms) and r(m),
    then their quotient, this project's over llama.cpp's (each cell the one above it over the one above that)."""
    ms = sorted(pass_seconds(results[0], OURS))
    rows = [["threads", "implementation", "decode, ms/token", "1-position pass, ms"] + [f"r({m})" for m in ms[1:]]]
    for result in results:
        label = forward_tables.threads_label(result["threads"])
        values = {}
        for name in (OURS, THEIRS):
            seconds = pass_seconds(result, name)
            r = forward_tables.r_of_m(seconds, min)
            values[name] = [min(result["decode"][name]) * 1e3, min(seconds[1]) * 1e3] + [r[m] for m in ms[1:]]
            rows.append([label, name] + [f"{value:.1f}" for value in values[name][:2]]
                        + [f"{value:.2f}" for value in values[name][2:]])
        rows.append([label, f"{OURS} / {THEIRS}"] + [f"{a / b:.2f}×" for a, b in zip(values[OURS], values[THEIRS])])
    return rows


def breakdown_rows(results, repeats):
    """[header, rows...]: this project's step part by part (benchmark_forward's breakdown lines, bests of `repeats`
    single steps), then llama.cpp's whole step through the same sampler, one column per thread count."""
    lines = [(name, part) for name, part in forward_tables.BREAKDOWN if not name.startswith(("strict", "sampled"))]
    rows = [[f"ms (best of {repeats})"] + [forward_tables.threads_label(res["threads"]) for res in results]]
    rows += [[f"{OURS}: {name}"] + [f"{part(res['breakdown'], None) * 1e3:.2f}" for res in results]
             for name, part in lines]
    rows.append([f"{THEIRS}: step through the same sampler (decode, ms/token)"]
                + [f"{min(res['decode'][THEIRS]) * 1e3:.2f}" for res in results])
    return rows


def agreement_text(run, results):
    """The sentence saying whether both wrote the same greedy tokens (and ids), and how close their logits were."""
    parts, disagreements = [], []
    for res in results:
        a, label = res["agreement"], forward_tables.threads_label(res["threads"])
        for key, what in (("tokenizer_difference", f"the prompt's {a['prompt_tokens']} token ids"),
                          ("check_difference", f"{a['n_check']} greedy tokens after the prompt"),
                          ("decode_difference", f"{a['n_new']} greedy tokens after the {run['n_context']}-token context")):
            if a[key] is not None:
                disagreements.append(f"{what} differ from position {a[key]} on ({label})")
        parts.append(f"{a['max_logit_difference']:.1e} with {label}")
    a = results[0]["agreement"]
    text = (f"Greedy agreement, prompt \"{run['prompt']}\": " + ("; ".join(disagreements) + "." if disagreements else
            f"the same {a['prompt_tokens']} token ids from both tokenizers, the same {a['n_check']} greedy tokens after "
            f"the prompt and the same {a['n_new']} after the {run['n_context']}-token context, with every thread count."))
    return text + (f" The largest difference between the two logits at the prompt's last position: {', '.join(parts)} "
                   f"(their standard deviation: {a['logit_std']:.2f}).")


def goal_text(results):
    """The sentence saying whether this project's decoding step is within DECODE_TARGET of llama.cpp's, per thread
    count."""
    ratios = {forward_tables.threads_label(res["threads"]): min(res["decode"][OURS]) / min(res["decode"][THEIRS])
              for res in results}
    met = [label for label, ratio in ratios.items() if ratio <= DECODE_TARGET]
    missed = [label for label in ratios if label not in met]
    text = ("This project's decoding step over llama.cpp's: "
            + ", ".join(f"{ratio:.2f}× with {label}" for label, ratio in ratios.items())
            + f". The goal, at most {DECODE_TARGET:.2f}×, is ")
    if met and missed:
        return text + f"met with {' and '.join(met)}, not with {' or '.join(missed)}."
    return text + (f"met with {' and '.join(met)}." if met else f"not met with {' or '.join(missed)}.")


CORE_PARTS = ("block matrix products", "LM head (x @ wte.T)", "attention over the cache", "rest of the forward pass")


def cores_text(results):
    """What the second core takes off each part of this project's step: each part's ms with 1 thread and with 2
    (benchmark_forward's breakdown lines), their quotient, and the part it takes least off (the highest quotient):
    where the step misses llama.cpp's with 2 threads, that part is what the second core leaves to win. "" unless
    both thread counts were measured."""
    by_threads = {res["threads"]: res["breakdown"] for res in results}
    if not {1, 2} <= by_threads.keys():
        return ""
    lines = dict(forward_tables.BREAKDOWN)
    ms = {name: [lines[name](by_threads[threads], None) * 1e3 for threads in (1, 2)] for name in CORE_PARTS}
    least = max(ms, key=lambda name: ms[name][1] / ms[name][0])
    return ("What the second core takes off each part of the step, ms with 1 thread → with 2 (their quotient): "
            + ", ".join(f"{name} {one:.2f} → {two:.2f} ({two / one:.2f})" for name, (one, two) in ms.items())
            + f". It takes least off the {least}.")


def run_text(run):
    """Where and how the run was made, in one paragraph; a warning when other jobs shared the cores (a load average
    more than one above the cores: this run's own threads count in it)."""
    busy = max(run["load_average"]) > run["cores"] + 1
    warning = (f" The machine was busy (a load average above its {run['cores']} cores): other jobs shared the cores, "
               f"so these times are slow and uneven, two threads' most (each product waits for its slower thread); "
               f"measure again on a quiet machine." if busy else "")
    return (f"`{run['command']}`: {run['weights']}, as an F32 GGUF file; llama-cpp-python {run['llama_cpp']} (llama.cpp "
            f"built from its source distribution), F32 KV cache, flash attention {'on' if run['flash_attn'] else 'off'}; "
            f"{run['machine']}, {run['blas']}{kind_text(run)}. Decode: {run['n_new']} greedy tokens after "
            f"{run['n_context']} cached, "
            f"per token; r(m): an m-position pass after {run['n_context']} cached over a 1-position pass. The minimum "
            f"of {run['repeats']} repeats, both implementations in turns (each after a pause for the other's threads "
            f"to sleep) in one process per thread count; "
            f"{run['minutes']:.1f} minutes, load average {run['load_average'][0]:.2f} at the start and "
            f"{run['load_average'][1]:.2f} at the end." + warning)


def kind_text(run):
    """', AVX2 kernels, 2026-11-27': the machine kind and the day of a run (tools/machine.machine_kind), or ''
    for a run's data made before they were recorded."""
    parts = [f"{KINDS[run['kind']]} kernels"] if run.get("kind") in KINDS else []
    return "".join(f", {part}" for part in parts + [run.get("date", "")] if part)


def markdown_report(data) -> str:
    """The tables and sentences of a run (what --json wrote), for the terminal and for docs/BENCHMARKS.md."""
    from tools.pages import wrap

    run, results = data["run"], data["results"]
    chosen = "; ".join(f"{forward_tables.threads_label(res['threads'])}: {res.get('routes') or 'the defaults'}"
                       for res in results)
    routes_text = (f"This project's routes, chosen in each process before anything was timed (speed/routes.py): "
                   f"{chosen}.")
    cores = cores_text(results)  # "" with one thread count
    return "\n".join([wrap(run_text(run)), "", wrap(routes_text), "",
                      benchmark.format_table(speed_rows(results), markdown=True), "",
                      wrap(goal_text(results)), "", benchmark.format_table(breakdown_rows(results, run["repeats"]),
                                                                           markdown=True), "",
                      *([wrap(cores), ""] if cores else []),
                      wrap(agreement_text(run, results))])


def disagrees(results):
    return any(res["agreement"][key] is not None for res in results
               for key in ("tokenizer_difference", "check_difference", "decode_difference"))


# ------------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------------


def compare(model=DEFAULTS["model"], threads=DEFAULTS["threads"], prompt=PROMPT, n_check=DEFAULTS["n_check"],
            n_context=DEFAULTS["n_context"], n_new=DEFAULTS["n_new"], ms=DEFAULTS["ms"], repeats=DEFAULTS["repeats"],
            seed=DEFAULTS["seed"], flash_attn=DEFAULTS["flash_attn"], gguf=None, reuse_gguf=DEFAULTS["reuse_gguf"],
            json=None):
    """This project and llama.cpp on the same weights, side by side (the module docstring says what is timed).

    Args:
        model: a released size (random weights of its shapes, from --seed) or a model folder the project loads.
        threads: comma-separated thread counts, each in a process of its own (OpenBLAS threads = llama.cpp's).
        prompt: the text whose greedy continuation both must agree on.
        n_check: greedy tokens after the prompt that must agree.
        n_context: cached tokens before the timed steps and passes (the prompt, then random tokens).
        n_new: greedy tokens per timed decoding run.
        ms: the m of r(m), comma-separated (1 is always added).
        repeats: how many times everything is timed, in turns; the minimum is kept.
        seed: the seed of the random weights and of the context's tokens.
        flash_attn: true: llama.cpp with flash attention (llama-cpp-python's default is off).
        gguf: write the GGUF file here and keep it (default: a temporary file).
        reuse_gguf: true: read --gguf as written by an earlier run of the same --model and --seed (the file names
            its weights: another run's are refused).
        json: also write every timing into this file.
    """
    args = {"model": model, "threads": threads, "prompt": prompt, "n_check": n_check, "n_context": n_context,
            "n_new": n_new, "ms": ms, "repeats": repeats, "seed": seed, "flash_attn": flash_attn, "gguf": gguf,
            "reuse_gguf": reuse_gguf, "json": json}
    with errors_as_one_line():
        settings = check_flags(args)
    missing = missing_extras()
    if missing:
        print(f"error: this comparison needs {' and '.join(missing)}, which this Python lacks: {INSTALL} (it builds "
              f"llama.cpp from source with cmake: about 15-20 minutes on 2 cores)", file=sys.stderr)
        raise SystemExit(2)
    import llama_cpp

    start, load_start = time.perf_counter(), load_average()
    print(f"{machine_description()}; load average {load_start:.2f} at the start", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        gguf_path = Path(settings["gguf"] or Path(folder) / "model.gguf")
        if not settings["reuse_gguf"]:
            with errors_as_one_line():  # a model folder whose weights are missing or damaged: one line
                encoder, hparams, params = load_weights(settings["model"], settings["seed"])
            write_gguf(gguf_path, params, hparams, encoder, name=weights_name(settings))
            print(f"wrote {gguf_path} ({gguf_path.stat().st_size / 1e6:.0f} MB)", flush=True)
            del params  # the processes below load their own
        if settings["threads"] == [blas_threads()] and "OPENBLAS_NUM_THREADS" in os.environ:
            results = [measure_here(settings, gguf_path, settings["threads"][0])]
        else:
            results = [result for threads in settings["threads"]
                       for result in measure_in_process(settings, gguf_path, threads, folder)]
    weights = (f"random weights of {settings['model']}'s shapes (seed {settings['seed']})"
               if settings["model"] in HPARAMS else f"the weights of {settings['model']}")
    run = {"command": "python tools/compare_llama_cpp.py" + "".join(
               f" --{name} {shlex.quote(str(value))}" for name, value in args.items()
               if str(value) != str(DEFAULTS[name]) and name not in ("json", "gguf", "reuse_gguf")),
           "weights": weights, "llama_cpp": llama_cpp.__version__, "machine": machine_description(),
           "blas": blas_description(), "minutes": (time.perf_counter() - start) / 60,
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "kind": machine_kind(),
           "load_average": [load_start, load_average()], "cores": os.cpu_count(),
           **{name: settings[name] for name in ("prompt", "n_check", "n_context", "n_new", "ms", "repeats",
                                                 "flash_attn", "threads")}}
    data = {"run": run, "results": results}
    print("\n" + markdown_report(data), flush=True)
    if settings["json"]:
        Path(settings["json"]).write_text(json_module.dumps(data, indent=1), encoding="utf-8")
        print(f"wrote {settings['json']}")
    if disagrees(results):
        raise SystemExit(1)


def main(argv=None):
    """`python tools/compare_llama_cpp.py ARGS`: every flag's name and value checked before any work, each value
    as the text typed (a prompt with a comma stays one prompt)."""
    run_script(compare, sys.argv[1:] if argv is None else list(argv), "tools/compare_llama_cpp.py", as_text=True)


if __name__ == "__main__":
    main()
