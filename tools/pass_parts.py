"""What a cached pass over m new positions costs, part by part, against the r(m) it should reach (a tool).

Read speed/products.py and tools/benchmark_forward.py first (r(m), and a decoding step part by part). A speculative
round's verification pass feeds m = K + 1 positions after the cached text; r(m) is its time over a one-position
pass. With the cache the pass reads every weight once whatever m is, so r(m) should stay near 1 while the arithmetic
is small. The goals, with about 500 cached tokens, are the machine kind's (GOALS_BY_KIND,
tools/machine.machine_kind): with OpenBLAS's AVX-512 kernels r(m) <= 1.3 for m <= 4, <= 1.6 at m = 8, <= 2.5 at m =
16; with its AVX2 kernels, which have no small-matrix kernel and multiply a few rows compute-bound, r(2) <= 1.65 and
r(3), r(4) <= 1.8. This tool times, for each m, in turns (the best of --rounds):

- the whole pass through the model function (create_model_fn, temperature 0: what calibrate times), after
  --n_cached tokens, the cache rolled back each time;
- its parts, each alone on the same shapes: the block matrix products (every linear of every block,
  products.matmul), the attention over the cache (every layer's gpt2.attention over n_cached + m keys, its
  heads shared with the helper process as the pass shares them (products.share_heads, on a products.kv_buffer), each
  layer's keys and values its own, as in a cache: one layer's, 12 times over, stayed in the processor's caches
  and took 0.08 one-position passes at m = 1 where the pass spends 0.15), the LM head (products.matmul by
  wte.T), logits_to_probs greedy (what the pass ends with), and at temperature 1 (what a sampled run's pass
  ends with instead), and "the rest" (the whole minus the parts: layer norms, GELU, biases, the cache writes,
  Python);
- and, inside the block products, their arithmetic alone (`arithmetic`): the same products on a slice of
  each matrix small enough to stay in the core's cache, so that no weight comes from memory, scaled up
  to every column and shared between the cores as products.matmul shares it. Where the block products grow
  with m as much as their arithmetic does, reading the weights and multiplying them do not overlap: the
  pass pays for both, one after the other.

Before anything is timed, speed/routes.py chooses each product's route on this machine (printed above the
table), and beside the chosen routes' pass the table gives the fastest whole pass with every weight matrix's
product on one route ("one route, best", and "r(m) / it": the chosen routes should be within ROUTE_GOAL of it).

Beside the whole pass's r(m), the table gives r(m) as calibration.calibrate measures it (what K="auto" plans
with): the median over its rounds of one pass each (3, more on a noisy machine), after the same cached tokens.
The goal column holds both to the goal: the best of --rounds says what the code can do, calibrate's median what a
planning run sees.

Each part's share is printed in one-position passes (its time over the whole m = 1 pass), so where r(m)
misses its goal the line that grew says which part holds it.

    python tools/pass_parts.py                      # 124M shapes, 512 cached tokens (about a minute)
    python tools/pass_parts.py --size 355M --ms 1,2,4,8,16 --rounds 9
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's root: python tools/...

import speed.openblas_env  # noqa: E402,F401  before NumPy loads OpenBLAS, which reads its settings then

import numpy as np  # noqa: E402

from tools import benchmark  # noqa: E402
from speed import second_core  # noqa: E402
from speed import calibration  # noqa: E402
from speed import products  # noqa: E402
from speed import routes  # noqa: E402
from gpt2 import causal_mask  # noqa: E402
from speed.plug import routed_attention as attention  # noqa: E402  (what a pass attends with)
from loaders.random_weights import check_memory_for  # noqa: E402
from records import timed  # noqa: E402
from model_fn import create_model_fn, logits_to_probs  # noqa: E402
from tools.benchmark_forward import block_matrices  # noqa: E402
from tools.machine import load_average, machine_description, machine_kind  # noqa: E402
from tools.pages import wrap  # noqa: E402
from command_line.flags import MAX_SEED, as_bool, as_text, as_whole_number, errors_as_one_line  # noqa: E402
from command_line.scripts import as_whole_numbers, run_script  # noqa: E402

AVX512_GOALS = {2: 1.3, 3: 1.3, 4: 1.3, 8: 1.6, 16: 2.5}  # the r(m) a pass over m positions should not exceed
GOALS_BY_KIND = {"avx512": AVX512_GOALS, "avx512-amd": AVX512_GOALS,  # by machine kind (tools/machine.KINDS):
                 "avx2": {2: 1.65, 3: 1.8, 4: 1.8}}  # the same kernels, the same goals, on Intel and on AMD
GOALS = GOALS_BY_KIND[machine_kind()]  # this machine's
ROUTE_GOAL = 1.1  # the chosen routes' pass over the fastest pass with every weight matrix on one route
PARTS = ("whole pass", "block products", "attention", "LM head", "logits_to_probs, greedy",
         "logits_to_probs, temperature 1", "block arithmetic",
         *(f"whole pass, {route} only" for route in products.ROUTES))
IN_CACHE_BYTES = 1 << 20  # a slice of a matrix this big stays in a core's cache (L2: 1-2 MB on today's servers)


def measure(size="124M", n_cached=512, ms=(1, 2, 3, 4, 8, 16), rounds=7, seed=0, params=None):
    """{m: {part: best seconds}} for an m-position pass after n_cached tokens (see the module docstring), on
    `params` (default: random weights of size's shapes, from seed), with the routes speed/routes.py chooses
    after the cached text's pass (`routes.current()` gives them afterwards); and the whole pass with every
    weight matrix's product on one route ("whole pass, panels only", ...), the chosen ones beaten if any is."""
    hparams = benchmark.hparams_of(size)
    rng = np.random.default_rng(seed)
    params = benchmark.measured_random_params(hparams, rng) if params is None else params
    n_embd, n_head, n_vocab = hparams["n_embd"], hparams["n_head"], hparams["n_vocab"]
    n_cached = min(n_cached, hparams["n_ctx"] - max(ms))  # a small model's context may hold fewer
    model = create_model_fn(params, hparams, temperature=0)
    tokens = rng.integers(0, n_vocab, n_cached + max(ms)).tolist()
    model(tokens[: n_cached + 1], 1)  # the cached text (not timed)
    model(tokens[: n_cached + 1], 1)  # a one-position pass: every kind of product met
    chosen = routes.choose()
    matrices = block_matrices(params)
    n_layer, head_dim = hparams["n_layer"], n_embd // n_head
    kv = products.kv_buffer((n_layer, 2, n_head, n_cached + max(ms), head_dim))  # as a cache's, in the same memory
    kv[...] = rng.standard_normal(kv.shape, dtype=np.float32)

    def parts_for(m):
        rows = {n: rng.standard_normal((m, n), dtype=np.float32) for n in (n_embd, 4 * n_embd)}  # [m, n_in]
        q = rng.standard_normal((n_head, m, head_dim), dtype=np.float32)  # [n_head, m, head_dim]
        layers = [kv[layer, :, :, : n_cached + m] for layer in range(n_layer)]  # [2, n_head, n_cached + m, hd] each
        mask = causal_mask(m, n_cached)  # [m, n_cached + m]
        logits = rng.standard_normal((m, n_vocab), dtype=np.float32)  # [m, n_vocab]
        return {
            "whole pass": lambda: model(tokens[: n_cached + m], m),
            "block products": lambda: [products.matmul(rows[w.shape[0]], w) for w in matrices],
            "attention": lambda: [products.share_heads(attention, q, k, v, mask) for k, v in layers],
            "LM head": lambda: products.matmul(rows[n_embd], params["wte"].T),
            "logits_to_probs, greedy": lambda: logits_to_probs(logits, temperature=0),
            "logits_to_probs, temperature 1": lambda: logits_to_probs(logits, temperature=1.0),
            **{f"whole pass, {route} only": one_route(route, lambda: model(tokens[: n_cached + m], m))
               for route in products.ROUTES},
        }

    def one_route(route, fn):  # fn with every weight matrix's product on `route` (the scores' as chosen)
        only = {**chosen, "blocks": [route] * routes.M_MAX, "head": [route] * routes.M_MAX}
        return lambda: (products.use_routes(only), fn(), products.use_routes(chosen))

    by_m = {m: {**parts_for(m), "block arithmetic": arithmetic(matrices, m, rng)} for m in ms}
    scale = {part: 1.0 for part in PARTS}
    cores = second_core.workers()  # products.matmul gives each worker an equal share of a matrix's columns
    scale["block arithmetic"] = slices_per_matrix(matrices) / cores  # the slices' time -> all columns, per core
    best = {m: {part: float("inf") for part in PARTS} for m in ms}
    for _ in range(rounds):
        for m in ms:  # in turns, so that a burst of load hits every m alike
            for part, fn in by_m[m].items():
                best[m][part] = min(best[m][part], timed(fn)[1] * scale[part])
    return best


def slices_per_matrix(matrices, budget=IN_CACHE_BYTES):
    """The smallest n such that 1/n of every matrix's columns fits in `budget` bytes and is the whole matrix
    (n = 1) or whole panels (of panel_width's widest): 12 for 124M (its [768, 3072] c_fc in slices of 256
    columns, 768 KB)."""
    shapes = {w.shape for w in matrices}
    for n in range(1, 1 + max(n_out for _, n_out in shapes)):
        if all((n == 1 or n_out % n == 0 and n_out // n % products.panel_width(n_in) == 0)
               and n_in * (n_out // n) * 4 <= budget for n_in, n_out in shapes):
            return n
    raise ValueError(f"no slice of these matrices' columns fits in {budget} bytes in whole panels")


def calibrated(size="124M", n_cached=512, ms=(1, 2, 3, 4, 8, 16), seed=0, params=None, chosen=None):
    """{m: r(m)} as calibration.calibrate measures it (median of its rounds) for the same passes as `measure`:
    a fresh model function of the same weights (pass measure's `params` to make them once), after n_cached
    tokens, each m in ms timed; with the routes `chosen` ({kind: [route for m = 1 ..]}, as `measure` chose
    them), else routes calibrate chooses itself."""
    hparams = benchmark.hparams_of(size)
    rng = np.random.default_rng(seed)
    params = benchmark.measured_random_params(hparams, rng) if params is None else params
    n_cached = min(n_cached, hparams["n_ctx"] - max(ms))
    prefix = rng.integers(0, hparams["n_vocab"], n_cached).tolist()
    costs = calibration.calibrate(create_model_fn(params, hparams, temperature=0), m_max=max(ms), prefix=prefix, ms=ms,
                                  routes=chosen)
    return {m: costs.measured[m] for m in ms}


def arithmetic(matrices, m, rng):
    """A function that multiplies m rows by the first 1/slices_per_matrix of every matrix's columns on this
    core (products.columns: the kernel products.matmul runs on each core), each slice one array reused for every
    matrix of its shape, one shape after the other, so it stays in cache: its time, times slices_per_matrix,
    over the cores that share the products, is the block products' arithmetic with no weight read from memory
    (see the module docstring)."""
    n = slices_per_matrix(matrices)
    by_row = {w.shape: w.flags.c_contiguous and not w.flags.f_contiguous for w in matrices}  # (speed/layouts.py)
    hot = {shape: np.asarray(rng.standard_normal((shape[0], shape[1] // n), dtype=np.float32),
                             order="C" if by_row[shape] else "F")
           for shape in by_row}  # [n_in, n_out / n] each: stored as the weights
    rows = {n_in: rng.standard_normal((m, n_in), dtype=np.float32) for n_in, _ in hot}  # [m, n_in]
    out = {shape: np.empty((m, w.shape[1]), dtype=np.float32) for shape, w in hot.items()}  # [m, n_out / n]
    by_shape = sorted(matrices, key=lambda w: w.shape)  # all products by one slice, then by the next: in cache
    work = [(rows[w.shape[0]], hot[w.shape], out[w.shape]) for w in by_shape]
    return lambda: [products.columns(x, w, 0, w.shape[1], y) for x, w, y in work]


def measurements(r, calibrated_r, m):
    """[the direct timing's r(m)] and calibrate's where it was measured: each is held to the goal."""
    return [r] + ([calibrated_r[m]] if m in calibrated_r else [])


def worst(r):
    """The largest of r's measurements (one number, or several), rounded as the table prints it: Python's round
    of the float, as f"{r:.2f}" does (NumPy's round of a float64 can differ in the last digit)."""
    return round(float(max(r if isinstance(r, (list, tuple)) else [r])), 2)


def goal_text(r, m):
    """'met' or 'missed by 0.12' for r(m) against GOALS; '' for an m without a goal. r: one number, or
    several measurements of it (the direct timing and calibrate's), each held to the goal: the worst counts."""
    if m not in GOALS:
        return ""
    return "met" if worst(r) <= GOALS[m] else f"missed by {worst(r) - GOALS[m]:.2f}"


def table(best, markdown=False, calibrated_r=None):
    """One row per m: r(m) of the whole pass (and calibrate's, {m: r}, where given), its goal, and each part in
    one-position passes (ms / whole m=1)."""
    one = best[min(best)]["whole pass"]
    calibrated_r = calibrated_r or {}
    header = ["m", "r(m)", *(["calibrate()"] if calibrated_r else []), "goal", "ms", "one route, best",
              "r(m) / it", "block products", "(their arithmetic)", "attention", "LM head", "logits_to_probs",
              "the rest", "(temperature 1)"]
    rows = []
    for m, parts in sorted(best.items()):
        r = parts["whole pass"] / one
        both = measurements(r, calibrated_r, m)
        rest = parts["whole pass"] - sum(parts[p] for p in ("block products", "attention", "LM head",
                                                            "logits_to_probs, greedy"))
        calibrate_column = [f"{calibrated_r[m]:.2f}" if m in calibrated_r else ""] if calibrated_r else []
        rows.append([str(m), f"{r:.2f}", *calibrate_column,
                     f"{'≤ ' + str(GOALS[m]) + ': ' if m in GOALS else ''}{goal_text(both, m)}",
                     f"{parts['whole pass'] * 1e3:.1f}", *best_route_cells(parts, one),
                     *[f"{parts[p] / one:.2f}" for p in ("block products", "block arithmetic", "attention", "LM head",
                                                         "logits_to_probs, greedy")],
                     f"{rest / one:.2f}", f"{parts['logits_to_probs, temperature 1'] / one:.2f}"])
    return benchmark.format_table([header, *rows], markdown) + misses_text(best, calibrated_r)


def best_route_cells(parts, one):
    """['1.23 (vectors)', '1.02']: the fastest whole pass with every weight matrix on one route, over the whole
    m = 1 pass (the chosen routes'), which route, and the chosen routes' pass over it (the goal: at most
    ROUTE_GOAL)."""
    timed = [name for name in products.ROUTES if f"whole pass, {name} only" in parts]
    if not timed:
        return ["", ""]  # a measurement without them
    route = min(timed, key=lambda name: parts[f"whole pass, {name} only"])
    seconds = parts[f"whole pass, {route} only"]
    return [f"{seconds / one:.2f} ({route})", f"{parts['whole pass'] / seconds:.2f}"]


def misses_text(best, calibrated_r=None):
    """For each m whose r(m) misses its goal (the direct timing's, or calibrate's {m: r} where given), the part
    that grew the most over its m = 1 time (in one-position passes), or '' when every goal is met."""
    one = best[min(best)]
    calibrated_r = calibrated_r or {}
    lines = []
    for m, parts in sorted(best.items()):
        r = parts["whole pass"] / one["whole pass"]
        both = measurements(r, calibrated_r, m)
        if goal_text(both, m).startswith("missed"):
            growth = {part: (parts[part] - one[part]) / one["whole pass"] for part in PARTS[1:5]}
            part = max(growth, key=growth.get)
            its_arithmetic = (parts["block arithmetic"] - one["block arithmetic"]) / one["whole pass"]
            by_calibrate = f" (calibrate(): {calibrated_r[m]:.2f})" if m in calibrated_r else ""
            lines.append(f"r({m}) = {r:.2f}{by_calibrate} misses its goal of {GOALS[m]} by "
                         f"{worst(both) - GOALS[m]:.2f}; the part that grew most is {part}: +{growth[part]:.2f} "
                         f"one-position passes over its m = 1 time"
                         + (f" (their arithmetic alone, the weights in cache: +{its_arithmetic:.2f})."
                            if part == "block products" else "."))
    return "\n\n" + "\n".join(lines) if lines else ""


def header_text(size, n_cached, rounds, loads=None):
    """The sentences above the table: what was timed, where, with which routes (and the load average at the
    start and at the end, where given)."""
    load = f"; load average {loads[0]:.2f} at the start, {loads[1]:.2f} at the end" if loads else ""
    return (f"{size} shapes, {n_cached} cached tokens, the best of {rounds} in turns; {machine_description()}, "
            f"helper process: {second_core.unavailable() or 'yes'}; {routes.fingerprint()}{load}. Routes chosen: "
            f"{routes.text(routes.current()) or 'the defaults'}. calibrate(): r(m) as calibration.calibrate "
            f"measures it, the median of its rounds. Parts in one-position passes: their time over the whole "
            f"m = 1 pass. One route, best: the fastest whole pass with every weight matrix on one route, and which.")


def main(size="124M", n_cached=None, ms="1,2,3,4,8,16", rounds=7, seed=0, markdown=False):
    """Print the table (see the module docstring).

    Args:
        size: the model's shapes (random weights): 124M, 355M, 774M, 1558M or a folder.
        n_cached: tokens in the cache before each pass; by default 512, or as many as the model's context holds
            before the largest m (a small model's); a number given that does not fit is refused, never cut down
            behind the header's back.
        ms: the positions per pass, comma-separated; 1 among them.
        rounds: rounds over every m (the best of each part counts).
        seed: the seed of the random weights and tokens.
        markdown: print the table as docs/BENCHMARKS.md holds it.
    """
    with errors_as_one_line():  # every flag before any work: one line `error: ...`, exit code 2
        hparams = benchmark.hparams_of(as_text(size, "--size"))
        check_memory_for([(size, hparams)])
        ms, rounds = as_whole_numbers(ms, "--ms"), as_whole_number(rounds, "--rounds", 1)
        seed = as_whole_number(seed, "--seed", 0, MAX_SEED)
        markdown = as_bool(markdown, "--markdown")
        if 1 not in ms:
            raise ValueError(f"--ms must hold 1: every part is counted in one-position passes; got {ms}")
        if max(ms) >= hparams["n_ctx"]:
            raise ValueError(f"--ms: {max(ms)} must be less than {size}'s context of {hparams['n_ctx']} tokens")
        room = hparams["n_ctx"] - max(ms)  # the cached tokens, then the largest pass
        n_cached = min(512, room) if n_cached is None else as_whole_number(n_cached, "--n_cached", 1)
        if n_cached > room:
            raise ValueError(f"--n_cached {n_cached} + the largest of --ms, {max(ms)}, is more than {size}'s "
                             f"context of {hparams['n_ctx']} tokens: give --n_cached {room} or fewer")
    params = benchmark.measured_random_params(hparams, np.random.default_rng(seed))  # made once
    start = load_average()
    best = measure(size, n_cached, ms, rounds, seed, params)
    calibrated_r = calibrated(size, n_cached, ms, seed, params, routes.current())
    header = header_text(size, n_cached, rounds, (start, load_average()))
    print((wrap(header) if markdown else header) + "\n")
    print(table(best, markdown=markdown, calibrated_r=calibrated_r))


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/pass_parts.py")
