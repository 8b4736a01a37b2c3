"""How each weight matrix is stored, column by column or row by row: measured where it runs, before a model is read.

Read speed/products.py first (its layout, its routes). A weight matrix w [n_in, n_out] can be kept in either
order with the same shape and values: column by column (Fortran order: "columns", the panels' layout) or row by
row (C order: "rows"). For the LM head, w is wte.T: wte kept row by row is wte.T by column, and the other way
round. A decoding step reads every weight once in a matrix-vector product, and which order BLAS reads faster
depends on the processor and on BLAS's kernels: by column it runs the dot-product kind (one short stream of
n_in numbers for each column), by row the kind that adds up rows (long streams of n_out numbers). On the AVX2
machine, one thread, the second read c_attn, c_fc and the LM head clearly faster (docs/BENCHMARKS.md); on the
AVX-512 ones the panels' small-matrix kernel needs the columns. So it is measured, not assumed (`measure`): for the
blocks' matrices and for the LM head apart, a step's product (one row) and a round's (LAYOUT_MS) in each
layout, on matrices of the model's shapes filled in memory as a model's are (loaders/matrix_memory.py), by
products.multiply's fastest route, shared with the helper processes as a model's products are; rows are taken
only where faster by more than 5%.

The loaders read each matrix straight into its layout (loaders/weights.stored_by_column), so no matrix is
copied. The choice is one per process (`for_model`): the layouts kept with the routes in a model's folder
(speed/routes.py's ROUTES_FILE, whose fingerprint names them, so a run reads a model as the run before it did and
makes the same numbers, bit for bit), else measured at the first model read (about two seconds, some 300 MB of
matrices, freed before the model is read). Random weights take the default unless a tool asks for the measured
ones (tools/benchmark.measured_random_params).

    layouts = for_model(routes.kept_layouts(folder), hparams)  # {"head": "rows"} on the AVX2 one, say
"""

import time

import numpy as np

from loaders.matrix_memory import MatrixMemory
from loaders.weights import read_only
from speed import products, second_core

LAYOUTS = ("columns", "rows")
DEFAULT = {"blocks": "columns", "head": "columns"}  # the panels' layout: what the products were built on
LAYOUT_MS = (1, 4)  # the rows of the products timed: a step's, and a round's pass
MEASURED_BYTES = 64 << 20  # each layout's matrices, per kind: more than a processor's caches hold
REPEATS = 3
KEEP_DEFAULT = 1.05  # the default stays unless the other layout is faster by more than this (as routes.py's)

_taken = None  # this process's layouts, once a model was read (or a tool asked for them)


def shapes(hparams):
    """{kind: [[n_in, n_out], ...]}: the matrices of a kind timed, in products' form: a block's four, as many
    layers as fill MEASURED_BYTES; the LM head's wte.T, at most as many columns as fill it."""
    n_embd, n_vocab = hparams["n_embd"], hparams["n_vocab"]
    block = [(n_embd, 3 * n_embd), (n_embd, n_embd), (n_embd, 4 * n_embd), (4 * n_embd, n_embd)]
    layers = -(-MEASURED_BYTES // (4 * sum(n_in * n_out for n_in, n_out in block)))
    return {"blocks": block * layers, "head": [(n_embd, min(n_vocab, MEASURED_BYTES // (4 * n_embd)))]}


def measure(hparams, repeats=REPEATS, clock=time.perf_counter):
    """{kind: {layout: seconds}}: for each kind, the products of LAYOUT_MS rows through its matrices (`shapes`,
    read-only, so that the helper processes share them as they share a model's) in each layout, each m by its
    fastest route (products.multiply), summed; the median of `repeats` turns, the layouts in turns."""
    rng, kinds = np.random.default_rng(0), shapes(hparams)
    made = {(kind, layout): _matrices(kind_shapes, kind, layout)
            for kind, kind_shapes in kinds.items() for layout in LAYOUTS}
    widths = {w.shape[0] for matrices in made.values() for w in matrices}  # the n_in of x's rows
    rows = {m: {n_in: rng.standard_normal((m, n_in), dtype=np.float32) for n_in in widths} for m in LAYOUT_MS}
    for _ in range(2):  # untimed: met twice, the matrices are the helpers' too (second_core.for_matrix)
        for kind, layout in made:
            _seconds(made[kind, layout], rows[1], products.default_route(kind, 1), kind, clock)
    times = {}
    for kind in kinds:
        turns = {layout: [] for layout in LAYOUTS}
        for _ in range(repeats):
            for layout in LAYOUTS:  # in turns: a burst of load falls on both
                turns[layout].append(sum(
                    min(_seconds(made[kind, layout], rows[m], route, kind, clock)
                        for route in (products.ROUTES if m > 1 else [products.default_route(kind, 1)]))
                    for m in LAYOUT_MS))
        times[kind] = {layout: float(np.median(seconds)) for layout, seconds in turns.items()}
    del made  # and helpers holding only these matrices end (renew): their copies are freed before the model
    second_core.renew()
    return times


def _matrices(shapes, kind, layout):
    """Read-only matrices w [n_in, n_out] of `shapes`, stored as `layout` says, where a model's are: the blocks'
    side by side in one array (loaders/matrix_memory.py), the head's w = wte.T of a wte [n_out, n_in] of its own
    stored the other way round. Written: untouched pages would all read as one."""
    by_column = layout == "columns"
    if kind == "head":
        return [read_only(np.full((n_out, n_in), 0.01, dtype=np.float32, order="C" if by_column else "F")).T
                for n_in, n_out in shapes]
    memory = MatrixMemory({number: (shape, by_column) for number, shape in enumerate(shapes)})
    matrices = [memory.empty(number) for number in range(len(shapes))]
    for w in matrices:
        w[...] = 0.01
    memory.seal()
    return matrices


def _seconds(matrices, rows, route, kind, clock):
    """The time of x @ w for every matrix, by `route` (products.multiply: shared as a model's product is)."""
    start = clock()
    for w in matrices:
        products.multiply(rows[w.shape[0]], w, route, kind)
    return clock() - start


def chosen(times):
    """{kind: layout}: "rows" where measured faster than "columns" by more than KEEP_DEFAULT, else the default."""
    return {kind: "rows" if seconds["rows"] * KEEP_DEFAULT < seconds["columns"] else "columns"
            for kind, seconds in times.items()}


def take(layouts):
    """Read this process's models in `layouts` ({kind: layout}, checked; None: forget, the next model measures).
    Returns the layouts taken before."""
    global _taken
    if layouts is not None:
        check(layouts, "the layouts")
    before, _taken = _taken, (dict(layouts) if layouts is not None else None)
    return before


def current():
    """This process's layouts, or None before a model was read in measured ones."""
    return dict(_taken) if _taken is not None else None


def for_model(kept, hparams):
    """This process's layouts: those taken already; else `kept` (a routes file's, made on this machine: None where
    there is none); else measured now for hparams' shapes (the default for a tiny model's, whose matrices are
    smaller than second_core.MIN_BYTES). Taken for the rest of the process."""
    if _taken is None:
        small = 4 * hparams["n_embd"] ** 2 < second_core.MIN_BYTES  # matrices no helper shares: their order is noise
        take(kept if kept is not None else DEFAULT if small else chosen(measure(hparams)))
    return current()


def check(layouts, where):
    """layouts if {kind: layout} for both kinds, each of LAYOUTS; else a ValueError in one line naming `where`."""
    if not (isinstance(layouts, dict) and set(layouts) == set(DEFAULT) and all(v in LAYOUTS for v in layouts.values())):
        raise ValueError(f"{where}: \"layouts\" must be {{\"blocks\": layout, \"head\": layout}}, each layout one of "
                         f"{', '.join(LAYOUTS)}; got {str(layouts)[:60]!r}")
    return layouts


def text(layouts):
    """'blocks by row, head by column': the layouts in words."""
    return ", ".join(f"{kind} by {layout[:-1]}" for kind, layout in layouts.items())
