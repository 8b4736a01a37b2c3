"""Which route each product takes on this machine: measured in a few seconds, not looked up by a machine's name.

Read speed/products.py first (the routes, and why a few rows are hard for BLAS). There is no one best way to
multiply m rows by a weight matrix on every CPU. OpenBLAS's small-matrix kernel, which the panels rely on, exists
for AVX-512 processors only; on an AVX2 one (most laptops, AMD before Zen 4) a product of a few rows runs the
general kernel, whose register tile is mostly empty for 2 rows, so there a few rows cost less as one
matrix-vector product per row, a panel at a time (products.columns), and a larger m can cost less padded with
zero rows to a size the kernel likes. Which is fastest depends on the processor, NumPy's
BLAS and the kernels that BLAS picks when it loads, so it is measured where it runs (`choose`): for each kind of
product a pass makes (products.KINDS: the blocks' matrices, the LM head's wte.T, attention's scores) and each m
from 1 to M_MAX, every route (products.ROUTES, SCORE_ROUTES) on the matrices the model itself multiplied, in
turns, the median of `repeats` (more turns where the median and the slowest turn choose differently); a route far
slower than the fastest in the first turn is not timed again.
A row count whose best is slower than a larger one's takes that one, padded with zero rows. Before the routes,
how many processes share each product (speed/second_core.py's workers: this one and its helpers) is measured
the same way, each count up to the cores this process may use (`worker_counts`, `measure_workers`), and then how
many of them share attention's heads (`measure_head_workers`): more processes are taken only where they are
faster, never by a rule.

The choice is made once, at a model's first use on this machine, and kept beside the model (`settle`:
ROUTES_FILE in its folder, which later runs read instead of measuring) and with the costs (speed/calibration.py
writes it into the costs file with r(m)): a run given either takes the same routes, so the same numbers, bit
for bit. Both keep the `fingerprint` of what decides it: NumPy's version, its BLAS and the kernels it runs, the
processor's name and its instruction sets, the cores the process may use, and the routes' own code. A choice
made under another fingerprint is not used: it is made anew. A file whose table `chosen` could not have made
(`check`) is refused in one line, before the models load (command_line/warm_up.check_kept_files).
"""

import hashlib
import inspect
import json
import platform
import re
import time
from functools import partial
from pathlib import Path

import numpy as np

from loaders.safe_files import write_atomically
from loaders.weights import read_small_json
from lookahead import AUTO_K_MAX
from speed import layouts as matrix_layouts
from speed import products
from speed import second_core

M_MAX = AUTO_K_MAX + 1  # the most rows a round's pass has: the last token and AUTO_K_MAX guesses
SAMPLE_BYTES = 160 << 20  # the block matrices timed: the first that hold this many bytes (`sampled_blocks`)
SCORE_LAYERS = 12  # the layers of keys the scores are timed over, each its own (as in a cache)
REPEATS = 3
WORKER_MS = (1, 2, 4)  # the rows of the passes timed to choose the worker count: a step, and rounds' passes
PRUNE = 1.5  # a route this many times as slow as the fastest in the first turn is not timed again
PAD_MAX = 3  # zero rows a padded route adds at most: m's and n's are timed at different moments, so a burst of
# load on m's turns could make any larger n look faster; a kernel's block of rows is at most 4 wide
MORE_TURNS = 2  # where the turns disagree (`unsettled`), `repeats` more are timed, at most this many times
KEEP_DEFAULT = 1.05  # the default route stays unless another is faster by more than this (noise is no reason)
WORKERS = "workers"  # the key of a table's worker count (second_core.workers): how many processes share a product
HEAD_WORKERS = "head workers"  # the key of how many of them share attention's heads (products.head_workers)
ROUTES_FILE = "routes.json"  # the name of the file, in a model's folder, that keeps the routes chosen for it
MAX_ROUTES_BYTES = 64 << 10  # a file `settle` writes is about 1 KB


ROUTE_CODE = (products.multiply, products.columns, products.panel_width, products.by_rows, products.row_block,
              products.scores, products.turned_round)


def fingerprint(layouts=None):
    """One line naming what decides which route is fastest: NumPy's version, its BLAS and the kernels it runs
    (OpenBLAS's core name), the processor's name, a digest of its instruction sets (/proc/cpuinfo's flags), the
    cores this process may use (`taskset -c 0` leaves one), whether helpers share them (and a count forced by
    second_core.WORKERS_VARIABLE: the routes were chosen for it), how the matrices are stored (`layouts`, else
    this process's: speed/layouts.py), and a digest of the code that multiplies by each route (ROUTE_CODE) and
    of what measures and chooses the routes and the worker counts (`measure`, `sampled_blocks`, `chosen`,
    `measure_workers`, `measure_head_workers`, `counts_in_turns`, and the settings they read): a route made
    faster, or a route or a count measured anew, is measured again."""
    config = getattr(np, "__config__", None)
    blas = getattr(config, "CONFIG", {}).get("Build Dependencies", {}).get("blas", {})
    blas_text = f"{blas.get('name', 'BLAS')} {blas.get('version', '')}".strip()
    core = second_core.openblas_core()
    model, flags = processor()
    digest = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12] if flags else ""
    measuring = (measure, sampled_blocks, chosen, measure_workers, measure_head_workers, counts_in_turns)
    settings = f"{REPEATS} {SAMPLE_BYTES} {PRUNE} {PAD_MAX} {MORE_TURNS} {KEEP_DEFAULT}"
    code = hashlib.sha256(("".join(inspect.getsource(function) for function in (*ROUTE_CODE, *measuring)) + settings)
                          .encode()).hexdigest()[:12]
    cores, forced = second_core._cores(), second_core.forced_workers()  # the counts timed (`worker_counts`)
    return (f"NumPy {np.__version__}, {blas_text}{', kernels ' + core if core else ''}, {model}"
            f"{', flags ' + digest if digest else ''}, {cores} core{'s' if cores != 1 else ''} "
            f"{'with' if second_core.unavailable() is None else 'without'} helpers"
            f"{f' ({forced} workers forced)' if forced else ''}, "
            f"{matrix_layouts.text(layouts or matrix_layouts.current() or matrix_layouts.DEFAULT)}, "
            f"routes' code {code}")


def processor():
    """(the processor's name, its instruction sets): the first processor's "model name" and "flags" in
    /proc/cpuinfo, else (where there is none: not Linux) the name Python knows and no flags."""
    fields = cpuinfo_fields()
    return fields.get("model name") or platform.processor() or platform.machine(), fields.get("flags", "").split()


def cpuinfo_fields(path="/proc/cpuinfo"):
    """The first processor's fields of /proc/cpuinfo ({"vendor_id": "AuthenticAMD", "cpu family": "26", ...}),
    or {} where there is none (not Linux)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as cpuinfo:
            first = cpuinfo.read().split("\n\n")[0]
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}


def candidates(kind, m):
    """The routes timed for a product of this kind and m rows. One row of a weight matrix is not timed: on every
    route it is a matrix-vector product, memory-bound, and the routes differ only in whose threads run it. One
    BLAS call on both cores, timed back to back, can look as fast as the default, and then cost twice as much in
    a pass that comes after the cores were idle a moment (the helper's and BLAS's threads handing the second
    core back and forth: seen on a virtual machine), so the one-token step keeps the default. For the same
    reason, where a helper process shares the products, one BLAS call on both cores is not timed at any m: its
    cost depends on what the second core did just before, which a short measurement cannot see (it was chosen
    for 16 rows, then cost twice the panels in the passes that followed)."""
    if kind == "scores":
        return list(products.SCORE_ROUTES)
    if m == 1:
        return [products.default_route(kind, 1)]
    helper = second_core.workers() > 1
    return [route for route in products.ROUTES if not (route == "one call" and helper)]


def measure(m_max=M_MAX, repeats=REPEATS, rng=None):
    """{kind: {m: {route: seconds}}} for every kind the model has multiplied (products remembers its big matrices
    and its scores' shape), m = 1 .. m_max, each route in turns with the others of its kind and m: the median of
    its turns (`typical`), and `repeats` more turns where the turns disagree (`unsettled`), at most MORE_TURNS
    times."""
    rng = rng or np.random.default_rng(0)
    work = weight_products(m_max, rng)  # kind -> (function of (route, m) that makes the products once)
    if products._met_scores:
        (n_stack, head_dim), n_keys = max(products._met_scores.items(), key=lambda item: item[0][0] * item[0][1])
        n_stack = max(1, n_stack // products.head_workers())  # each process attends with its share of the heads
        kv = products.kv_buffer((SCORE_LAYERS, n_stack, n_keys + m_max, head_dim))
        kv[...] = rng.standard_normal(kv.shape, dtype=np.float32)
        q = rng.standard_normal((n_stack, m_max, head_dim), dtype=np.float32)

        def score_products(route, m):
            second_core.one_core()  # as in a pass: BLAS on the calling thread where helpers share the heads
            return [products.multiply(q[:, :m], k[:, : n_keys + m].transpose(0, 2, 1), route, "scores") for k in kv]

        work["scores"] = score_products
    seconds = {kind: {m: {route: [] for route in candidates(kind, m)} for m in range(1, m_max + 1)} for kind in work}
    timing = [(kind, m) for kind in work for m in range(1, m_max + 1)]
    for more in range(MORE_TURNS + 1):
        if more:  # only the kinds and m's whose turns disagree are timed again
            timing = [(kind, m) for kind, m in timing if unsettled(seconds[kind][m], partial(fastest, kind, m))]
        for _ in range(repeats):
            for kind, m in timing:
                by_route = seconds[kind][m]
                best = min((min(times) for times in by_route.values() if times), default=None)
                for route, times in by_route.items():
                    if times and min(times) > PRUNE * best:
                        continue  # far slower in the first turn: not worth the seconds
                    times.append(timed(work[kind], route, m))
    return {kind: {m: {route: typical(times) for route, times in by_route.items()}
                   for m, by_route in by_m.items()} for kind, by_m in seconds.items()}


def typical(times):
    """The seconds a route or a count is taken to cost, of its turns: their median. Not the fastest turn, which a
    route fast only when the other core happens to be free (one BLAS call on both cores) wins by luck, nor the
    slowest, which one burst of other work decides: on a noisy virtual machine the slowest turns chose one worker
    for 355M in 1 of 4 tries, where two were faster. [1.0, 3.0, 1.1] gives 1.1."""
    return float(np.median(times))


def unsettled(times, pick):
    """True where the turns do not agree: pick ({option: seconds} -> the option taken) takes one option on each
    option's `typical` turn and another on its slowest (a burst on one option's turn, or an option fast on some
    turns only): more turns are timed. {"panels": [1, 1, 3], "halves": [2, 2, 2]} with the fastest taken: True."""
    return pick({option: typical(seconds) for option, seconds in times.items()}) != pick(
        {option: max(seconds) for option, seconds in times.items()})


def weight_products(m_max, rng):
    """{kind: a function of (route, m) that multiplies m rows by the weight matrices the model has multiplied}:
    "blocks" (`sampled_blocks`: the biggest model's first block matrices), "head" (its LM head); those it has."""
    work = {}
    blocks, _ = sampled_blocks()
    if blocks:
        rows = {w.shape[0]: rng.standard_normal((m_max, w.shape[0]), dtype=np.float32) for w in blocks}
        work["blocks"] = lambda route, m: [products.multiply(rows[w.shape[0]][:m], w, route, "blocks")
                                           for w in blocks]
    heads = sorted(products._met["head"].values(), key=lambda wte: -wte.nbytes)[:1]
    if heads:
        wte = heads[0]  # [n_vocab, n_embd]: the LM head multiplies by wte.T
        row = rng.standard_normal((m_max, wte.shape[1]), dtype=np.float32)
        work["head"] = lambda route, m: products.multiply(row[:m], wte.T, route, "head")
    return work


def sampled_blocks():
    """(the block matrices timed: the biggest model's first, in the order a pass multiplies them, until they hold
    SAMPLE_BYTES (or all of them), how many block matrices that model's pass multiplies): 124M's first 24 of 48
    (6 layers, 170 MB). A pass reads every weight once, from memory: so must the sample, or a product finds part of
    its matrices still in the processor's last cache from the product timed before it, and how much depends on
    what that product was. Two layers (57 MB, against the 32 MB cache of an AMD EPYC Zen 5) timed two rows at
    less than one (the one-row product comes first in a turn) and three at about two's cost, so two rows were
    sometimes padded to three or four, which in a pass cost more than the panels; with six layers the rows cost
    what they cost in a pass (tools/pass_parts.py)."""
    met = list(products._met["blocks"].values())
    n_embd = max((min(w.shape) for w in met), default=0)  # the biggest model's (a draft's matrices are smaller)
    biggest = [w for w in met if min(w.shape) == n_embd]
    held = np.cumsum([w.nbytes for w in biggest])  # [the biggest model's block matrices]: bytes up to each
    return biggest[: int(np.searchsorted(held, SAMPLE_BYTES)) + 1], len(biggest)


def worker_counts():
    """The worker counts timed (second_core.workers): 1, 2, 4, ... up to the cores this process may use, and that
    number itself (1 and 2 on two cores; 1, 2, 4, 6 on six); only the count in force where one is forced
    (second_core.WORKERS_VARIABLE) or no helper can run."""
    if second_core.forced_workers() or second_core._REASON is not None:
        return [second_core.workers()]
    cores = second_core._cores()
    return sorted({2**i for i in range(cores.bit_length()) if 2**i <= cores} | {cores})


def measure_workers(repeats=REPEATS, rng=None):
    """{count: seconds} of the weight products of a step and of rounds' passes (WORKER_MS rows), each by its fastest
    route for that count (`candidates`), shared among each count of `worker_counts`, in turns, the `typical` of
    each count's turns and more turns where they disagree (as `measure` takes a route's); {} where there is
    nothing to choose (one count, no big product made yet). The blocks' sample is scaled to a pass's
    (`sampled_blocks`: 124M's 24 matrices times 48 / 24), so the blocks weigh against the LM head as in a pass
    (unscaled, the head's noise chose one worker on the AVX2 kind where two made the blocks' products of a round's
    pass markedly faster)."""
    counts, work = worker_counts(), weight_products(max(WORKER_MS), rng or np.random.default_rng(0))
    if len(counts) < 2 or not work:
        return {}
    sample, in_a_pass = sampled_blocks()
    per_pass = {"blocks": in_a_pass / max(len(sample), 1), "head": 1.0}  # each kind's time scaled to a pass's
    seconds = {count: [] for count in counts}

    def turn():
        for count in counts:
            second_core.use_workers(count)  # new helpers, as many as count says
            for make in work.values():
                make(products.default_route("blocks", 1), 1)  # the first product may fork the helpers
            seconds[count].append(sum(per_pass[kind] * min(timed(make, route, m) for route in candidates(kind, m))
                                      for kind, make in work.items() for m in WORKER_MS))

    return counts_in_turns(seconds, turn, repeats)


def counts_in_turns(seconds, turn, repeats):
    """{count: the `typical` of its seconds} after turn() (which times every count once, appending to seconds[count])
    ran `repeats` times, and `repeats` more while the counts' turns disagree (`unsettled` for `fewest_fastest`), at
    most MORE_TURNS times: how measure_workers and measure_head_workers time their counts."""
    for more in range(MORE_TURNS + 1):
        if more and not unsettled(seconds, fewest_fastest):
            break
        for _ in range(repeats):
            turn()
    return {count: typical(times) for count, times in seconds.items()}


def measure_head_workers(repeats=REPEATS, rng=None):
    """{count: seconds} of attention as the model met it (its heads, its longest cache, over SCORE_LAYERS layers
    of keys each its own) for a step and a round's pass (WORKER_MS queries), the heads shared among each count
    of `worker_counts` up to the workers sharing the products, in turns, the `typical` of each count's turns
    and more turns where they disagree; {} where there is nothing to choose. Apart from the products' count:
    attention reads the cache in a small product per head, and a hand-over can cost what a helper's share saves.
    Each count is timed on the memory a cache gets with it (products.kv_buffer: this process's own with 1, faster
    to read, shared with more)."""
    counts = [count for count in worker_counts() if count <= second_core.workers()]
    if len(counts) < 2 or not products._met_heads:
        return {}
    rng = rng or np.random.default_rng(0)
    (n_head, head_dim), (attend, n_keys) = max(products._met_heads.items(), key=lambda item: item[0][0] * item[0][1])
    values = rng.standard_normal((SCORE_LAYERS, 2, n_head, n_keys + max(WORKER_MS), head_dim), dtype=np.float32)
    q = rng.standard_normal((n_head, max(WORKER_MS), head_dim), dtype=np.float32)

    def attend_all(kv, m):
        mask = np.zeros((m, n_keys + m), dtype=np.float32)  # [m, n_keys + m]: every key seen, as the timing needs
        return [products.share_heads(attend, q[:, :m], *layer[:, :, : n_keys + m], mask) for layer in kv]

    seconds, before, caches = {count: [] for count in counts}, products.use_head_workers(None), {}
    try:
        for count in counts:
            products.use_head_workers(count)
            caches[count] = products.kv_buffer(values.shape)  # the memory a cache gets with this count
            caches[count][...] = values

        def turn():
            for count in counts:
                products.use_head_workers(count)
                attend_all(caches[count], 1)  # the first heads shared may fork helpers that have `attend`
                seconds[count].append(sum(timed(attend_all, caches[count], m) for m in WORKER_MS))

        return counts_in_turns(seconds, turn, repeats)
    finally:
        products.use_head_workers(before)


def timed(make, route, m):
    """The seconds make(route, m) takes."""
    start = time.perf_counter()
    make(route, m)
    return time.perf_counter() - start


def fewest_fastest(seconds):
    """The count to take of measure_workers' {count: seconds}: the fewest processes, unless more are faster by more
    than KEEP_DEFAULT (a helper must earn its core); None for no times. {1: 10.0, 2: 6.0, 4: 5.9} gives 2."""
    best = None
    for count in sorted(seconds):
        if best is None or seconds[count] * KEEP_DEFAULT < seconds[best]:
            best = count
    return best


def fastest(kind, m, by_route):
    """The route of {route: seconds} taken for m rows of this kind: the fastest, but the default one
    (products.default_route) unless another beats it by more than KEEP_DEFAULT. At m = 2 of the blocks,
    {"panels": 1.04, "vectors": 1.0} gives panels, {"panels": 1.1, "vectors": 1.0} vectors."""
    route = min(by_route, key=by_route.get)
    default = products.default_route(kind, m)
    return default if default in by_route and by_route[default] <= KEEP_DEFAULT * by_route[route] else route


def chosen(times):
    """{kind: [route for m = 1 .. m_max]} from measure's times: the `fastest` route at each m, or, from m = 2,
    PADDED + a larger m (by at most PAD_MAX rows) whose chosen direct route is faster still."""
    table = {}
    for kind, by_m in times.items():
        direct = {m: fastest(kind, m, by_route) for m, by_route in by_m.items()}
        best = {m: (route, by_m[m][route]) for m, route in direct.items()}
        routes = {}
        for m in sorted(by_m, reverse=True):  # the larger m first: a row count is padded only to a direct one
            larger = [n for n in by_m if 1 < m < n <= m + PAD_MAX and not routes[n].startswith(products.PADDED)
                      and best[n][1] * KEEP_DEFAULT < best[m][1]]  # (one row padded would read the same weights)
            padded = min(larger, key=lambda n: best[n][1], default=None)
            routes[m] = products.PADDED + str(padded) if padded else best[m][0]
        table[kind] = [routes[m] for m in sorted(by_m)]
    return table


def use(table):
    """Take the routes of `table` ({kind: [route for m = 1 ..]}, and WORKERS: a count, where it holds one) here and
    in the helper processes (new helpers, forked from this process with them, where the count or the scores'
    routes change: a helper attends with its own copy of them). Returns the routes taken before."""
    before = current()
    products.use_routes(table)  # (its routes: the counts are second_core's and products.use_head_workers')
    products.use_head_workers(table.get(HEAD_WORKERS))
    renewed = second_core.use_workers(table.get(WORKERS))
    if not renewed and before.get("scores") != table.get("scores"):  # each job names its weight matrix's route
        second_core.renew()
    return before


def current():
    """The routes taken now, {kind: [route for m = 1 ..]}, and WORKERS and HEAD_WORKERS where counts were taken
    ({} for the defaults)."""
    count, heads = second_core.chosen_workers(), products._head_workers
    return {**({WORKERS: count} if count else {}), **({HEAD_WORKERS: heads} if heads else {}),
            **{kind: list(routes) for kind, routes in products._routes.items()}}


def choose(m_max=M_MAX, repeats=REPEATS):
    """Measure how many processes share the products (`measure_workers`), then how many of them share attention's
    heads (`measure_head_workers`), taking the fewest of the fastest each time (`fewest_fastest`); then measure the
    routes of the products this process has made so far (`measure`) and take the fastest (`chosen`, `use`):
    {WORKERS: count, HEAD_WORKERS: count, kind: [route for m = 1 .. m_max]} ({} if no big product was made yet;
    no count where there was none to choose). A few seconds."""
    count = fewest_fastest(measure_workers(repeats))
    second_core.use_workers(count)
    heads = fewest_fastest(measure_head_workers(repeats))
    products.use_head_workers(heads)
    table = {**({WORKERS: count} if count else {}), **({HEAD_WORKERS: heads} if heads else {}),
             **chosen(measure(m_max, repeats))}
    use(table)
    return table


def check(table, where):
    """table, if it is one `chosen` could have made: {kind of products.KINDS: [route for m = 1 .. at most M_MAX]},
    each route one `valid` for its m; else a ValueError in one line naming `where`, the kind and the m."""
    if not isinstance(table, dict) or not set(table) <= {*products.KINDS, WORKERS, HEAD_WORKERS}:
        raise ValueError(f"{where}: \"routes\" must be {{kind: [route, ...]}} for kinds among "
                         f"{', '.join(products.KINDS)}, and \"{WORKERS}\" and \"{HEAD_WORKERS}\": counts")
    most = {WORKERS: second_core.WORKERS_MAX, HEAD_WORKERS: table.get(WORKERS, second_core.WORKERS_MAX)}
    for key, count in ((key, table[key]) for key in (WORKERS, HEAD_WORKERS) if key in table):
        if type(count) is not int or not 1 <= count <= most[key]:  # (not bool: True is an int too)
            raise ValueError(f"{where}: \"routes\" \"{key}\" must be a number of processes from 1 to "
                             f"{most[key]}; got {str(count)[:40]!r}")
    for kind, routes in ((kind, routes) for kind, routes in table.items() if kind in products.KINDS):
        if not (isinstance(routes, list) and 1 <= len(routes) <= M_MAX):
            got = f"{len(routes)} routes" if isinstance(routes, list) else f"{routes!r:.40}"
            raise ValueError(f"{where}: \"routes\" of {kind} must be a list of 1 to {M_MAX} routes, one for each m "
                             f"from 1 (as they are measured); got {got}")
        for m, route in enumerate(routes, start=1):
            if not valid(kind, m, route, routes):
                raise ValueError(f"{where}: \"routes\" of {kind} for m = {m} must be {allowed(kind, m)}; got "
                                 f"{str(route)[:40]!r}")
    return table


def valid(kind, m, route, routes):
    """True if `chosen` can give route for m rows of this kind in the table routes: for one row of a weight matrix
    the default (it is never timed), else a route of the kind, or from m = 2 PADDED + N, N written in ASCII digits,
    m < N <= m + PAD_MAX within the table, N's own route direct."""
    known = products.SCORE_ROUTES if kind == "scores" else products.ROUTES
    if m == 1 and kind != "scores":
        return route == products.default_route(kind, 1)
    if route in known:
        return True
    rows = route[len(products.PADDED):] if isinstance(route, str) and route.startswith(products.PADDED) else ""
    if not re.fullmatch("[0-9]{1,3}", rows):  # not str.isdigit: "²" is a digit to it, and no int
        return False
    return 1 < m < int(rows) <= min(m + PAD_MAX, len(routes)) and routes[int(rows) - 1] in known


def allowed(kind, m):
    """What `valid` takes for m rows of this kind, in words."""
    if m == 1 and kind != "scores":
        return f"{products.default_route(kind, 1)} (one row keeps the default route)"
    known = products.SCORE_ROUTES if kind == "scores" else products.ROUTES
    padded = f", or '{products.PADDED}N', N from {m + 1} to {m + PAD_MAX}, whose route is one of them" if m > 1 else ""
    return f"one of {', '.join(known)}{padded}"


def text(table):
    """The routes in one line: '2 workers, heads on 1; blocks 1 panels, 2 vectors, 3 padded to 4, 4-17 panels;
    head ...' (the heads' count where it was measured)."""
    heads = f", heads on {table[HEAD_WORKERS]}" if HEAD_WORKERS in table else ""
    lines = [f"{table[WORKERS]} worker{'s' if table[WORKERS] != 1 else ''}{heads}"] if WORKERS in table else []
    for kind, routes in ((kind, routes) for kind, routes in table.items() if kind in products.KINDS):
        spans, start = [], 1
        for m in range(1, len(routes) + 1):
            if m == len(routes) or routes[m] != routes[m - 1]:
                spans.append(f"{start}{'-' + str(m) if m > start else ''} {routes[m - 1]}")
                start = m + 1
        lines.append(f"{kind} {', '.join(spans)}")
    return "; ".join(lines)


def settle(folder=None):
    """The routes of the products this process has made so far, once per machine: (table, one line saying where
    they came from). Those kept in folder/ROUTES_FILE where that file was written on a machine of this
    `fingerprint`; else chosen now (`choose`, a few seconds) and written there, for the next run to read. With
    no folder (a model in the Hugging Face cache, which is not this project's to write into, or random weights)
    they are chosen and not kept. A file that is not one `settle` wrote is a ValueError in one line naming it.
    The file keeps the layouts the model was read in too (speed/layouts.py: `kept_layouts` gives them back).

    main.py settles the target's routes after its untimed warm-up pass, so that plain decoding, not only K=auto's
    calibration, takes the fastest routes; delete the file to measure them again."""
    path = Path(folder) / ROUTES_FILE if folder is not None else None
    stored = f"matrices: {matrix_layouts.text(matrix_layouts.current() or matrix_layouts.DEFAULT)}"
    if path is not None and path.is_file():
        kept = read_routes(path)
        if kept["fingerprint"] == fingerprint():
            use(kept["routes"])
            return kept["routes"], (f"routes as chosen on this machine before ({path}): "
                                    f"{text(kept['routes']) or 'the defaults'}; {stored}")
    start = time.perf_counter()
    table = choose()
    seconds = time.perf_counter() - start
    line = f"routes chosen on this machine ({seconds:.1f} s): {text(table) or 'the defaults'}; {stored}"
    if path is None:
        return table, line
    layouts = matrix_layouts.current() or matrix_layouts.DEFAULT  # kept too: the next run reads the model alike
    try:
        write_atomically(path, json.dumps({"fingerprint": fingerprint(), "routes": table, "layouts": layouts},
                                          indent=1) + "\n")
    except OSError as error:
        return table, f"{line} (not written to {path}: {error.strerror or error})"
    return table, f"{line} (written to {path}: later runs take them from there)"


def read_routes(path):
    """{"fingerprint": text, "routes": table, "layouts": {kind: layout}} (layouts in a file since they were
    measured) from a file `settle` wrote, each field checked; else a ValueError in
    one line naming the file, the field and what to do."""
    where = f"the routes file {path}"
    data = read_small_json(path, MAX_ROUTES_BYTES, where, "delete it and the next run chooses the routes anew")
    if not (isinstance(data, dict) and isinstance(data.get("fingerprint"), str) and len(data["fingerprint"]) <= 1_000):
        raise ValueError(f"{where} must hold {{\"fingerprint\": text, \"routes\": {{kind: [route, ...]}}}}; delete it "
                         f"and the next run chooses the routes anew")
    try:
        check(data.get("routes"), where)
        if "layouts" in data:
            matrix_layouts.check(data["layouts"], where)
    except ValueError as error:
        raise ValueError(f"{error}; delete it and the next run chooses the routes anew") from None
    return data


def kept_layouts(folder):
    """The layouts (speed/layouts.py) kept in folder/ROUTES_FILE by a run on a machine of this `fingerprint` with
    them, for the loaders to read the model so again; None where there are none (no folder, no file, another
    machine). A file that is not one `settle` wrote is a ValueError in one line naming it."""
    path = Path(folder) / ROUTES_FILE if folder is not None else None
    if path is None or not path.is_file():
        return None
    kept = read_routes(path)
    layouts = kept.get("layouts")
    return layouts if layouts is not None and kept["fingerprint"] == fingerprint(layouts) else None
