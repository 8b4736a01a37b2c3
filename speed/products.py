"""How a weight matrix is stored and multiplied, so that a pass over a few rows costs about what one row costs.

Machinery: read it after gpt2.py and speed/plug.py, through which the model multiplies every weight matrix by
`matmul` below and shares attention's heads through `share_heads`. It needs only NumPy, speed/second_core.py
(the helper processes on the other cores), speed/shared_cache.py (the cache's memory) and speed/routes.py's
choice. docs/BENCHMARKS.md's tables measure every choice below, on each kind of machine (the figures command).

The layout. A weight matrix w [n_in, n_out] is stored column by column (Fortran order, `column_major`): same
shape and values, only the order in memory changes. Read the other way round those bytes are w.T, and any
`width` consecutive columns of w sit one after the other: the matrix is a stack of contiguous panels
[n_out / width, width, n_in], with no copy (`panel_width`). The loaders make this layout as they read (wte
already is it for the LM head's wte.T), or, where speed/layouts.py measured it faster, row by row (`by_rows`).

Why panels. With the KV cache a pass over m new positions reads every weight once and does 2·m flops per
weight: for a few rows it is memory-bound, and m rows should cost about what one costs. One BLAS call does not
deliver that: for two rows or more its matrix-matrix kernel first PACKS the whole matrix into a buffer of its
own, so the matrix travels from memory about three times. Multiplying panel by panel (ONE `np.matmul(x,
panels)`) reads each panel once and uses it from the core's cache for every row; OpenBLAS's small-matrix kernel
multiplies a panel where it lies (`panel_width` keeps panels within it) until the arithmetic itself takes longer
than reading the weights.

Why several processes. One core cannot read memory as fast as several, and a panel product is too small for BLAS
to split, so `matmul` splits the COLUMNS: this process multiplies the first equal share of w's panels, each
helper process one of the others (speed/second_core.py: why processes, how many, how they meet), each on one
core. A prompt (more than PANEL_ROWS_MAX rows) is one BLAS call on every core while the helpers sleep. Where
no helper can run (not Linux on x86-64, one core, OPENBLAS_NUM_THREADS=1) this process does it all.

Which route, by machine. The panels rely on OpenBLAS's small-matrix kernel, which exists for AVX-512 processors
only; on an AVX2 one (most laptops) a few-row product runs the general kernel, compute-bound, and other routes
win there (m matrix-vector products, a larger m padded with zero rows, ...). So for each kind of product
(`kind_of`) and each m, `matmul` takes the route speed/routes.py measured fastest on the machine that runs
(`route_of`, `multiply`), else the default above.

Attention. The scores of a few queries, q @ k.T, hand OpenBLAS a TRANSPOSED operand, and past a small size it
packs the keys first; the product turned round, (k @ q.T).T, transposes nothing, so `matmul` turns such a
product round for 2 to PANEL_ROWS_MAX rows. And the attention reads the whole KV cache, memory-bound like the
weights but in products too small to split: `share_heads` gives a share of the HEADS to each helper, as many as
routes.py found paying for their hand-overs (`head_workers`); a prompt's to every worker (its softmax is NumPy's,
on one core). Where a step's heads are shared, the cache is a memfd each helper maps (`kv_buffer`), else this
process's own memory (its 2 MB pages are read faster), and a prompt's helpers get copies of their keys and values.
"""

import weakref

import numpy as np

from speed import second_core
from speed import shared_cache

PANEL_ROWS_MAX = 24  # longer passes (a prompt) go to one BLAS call on all cores: faster there
SMALL_KERNEL_MAX = 100**3  # OpenBLAS runs m x width x n_in <= this in its small-matrix kernel (see panel_width)
SMALL_KERNEL_ROWS_BY_COLUMNS_MAX = 1200  # ... and, for a panel stored as ours are, m x width <= this
ROW_BLOCK_BYTES = 512 << 10  # a block of a matrix stored row by row, for "panels" (`row_block`): a core's own cache
ROW_BLOCK_COLUMNS = 4096  # ... and its columns at most: long enough for each row's part to stream
ROW_EDGE = 16  # a share of a matrix stored row by row starts at a multiple of this many columns: BLAS then
# adds each column's products in the same order in any share (at a multiple of 8 alone it did not)


def panel_width(n_in: int, m: int = 16) -> int:
    """Columns of w per panel, for a product of m rows: the widest power of two up to 64 whose product with
    max(m, 16) rows stays in OpenBLAS's small-matrix kernel, m x width x n_in <= 100^3 and m x width <= 1,200
    (its rule for Intel's AVX-512 cores: kernel/x86_64/sgemm_small_kernel_permit_skylakex.c). That kernel runs
    on the calling thread and packs nothing; past it, OpenBLAS packs each panel first (16 rows through 355M's
    c_fc were much slower in 64-column panels than in 32-column ones).
    At least 16 rows, so that the passes of a round of up to 15 guesses share one width: 64 for n_in = 768, 32
    for 1024 to 1600, 16 for 3072, 8 for 4096 to 6400; for more rows, narrower (768: 32 from 19 rows)."""
    rows = max(m, 16)
    width = 64
    while width > 1 and (rows * width * n_in > SMALL_KERNEL_MAX or rows * width > SMALL_KERNEL_ROWS_BY_COLUMNS_MAX):
        width //= 2
    return width


def column_major(params: dict) -> dict:
    """The same parameters, with each block's weight matrices stored column by column (Fortran order).

    Shapes and values do not change: w is still [n_in, n_out] and `x @ w` is the same product; only the order
    of the numbers in memory does (see the module docstring for why). The loaders in utils.py and
    `loaders.random_weights.random_params` return parameters in this layout; wte needs nothing: the LM head
    multiplies by wte.T, which is wte read column by column.
    """

    def convert(tree):
        if isinstance(tree, dict):
            return {key: convert(value) for key, value in tree.items()}
        return np.asfortranarray(tree) if tree.ndim == 2 else tree  # the [n_in, n_out] matrices

    return {**params, "blocks": [convert(block) for block in params["blocks"]]}


ROUTES = ("panels", "vectors", "halves", "one call")  # the routes of x @ w for a weight matrix (`multiply`)
SCORE_ROUTES = ("turned round", "plain", "vectors")  # the routes of attention's scores, q @ k.T (`scores`)
PADDED = "padded to "  # "padded to 4": the product of m rows made as one of 4, zero rows added (either kind)
KINDS = ("blocks", "head", "scores")  # the products a pass makes, each with routes of its own (`kind_of`)
HOWS = ("panels", "vectors", "halves")  # how one core multiplies its columns (`columns`; a helper gets the index)

_routes = {}  # kind -> [its route for m = 1, 2, ...] as speed/routes.py chose them; beyond: `default_route`
_met = {kind: weakref.WeakValueDictionary() for kind in ("blocks", "head")}  # id -> a big matrix multiplied
_met_scores = {}  # (n_stack, head_dim) -> the keys of the last big scores product: what speed/routes.py times
_met_heads = {}  # (n_head, head_dim) -> (attend, most keys) of the heads `share_heads` met: what routes.py times
_head_workers = None  # how many of the workers share attention's heads, as speed/routes.py measured (None: all)


def kind_of(x, w):
    """Which product x @ w is, for its route: "scores" (a stack x [n_stack, m, n_in] by a transposed view, as
    attention's q @ k.T), "head" (w [n_in, n_out] the transpose of a stored matrix, as the LM head's wte.T),
    "blocks" (a stored w, as every block's matrices), each stored by column or by row (`columns`); or None
    (anything else, a strided view: plain x @ w)."""
    if x.ndim == 3 and w.ndim == 3 and w.strides[1] == w.itemsize:
        return "scores"
    if x.ndim != 2 or w.ndim != 2 or not (w.flags.f_contiguous or w.flags.c_contiguous):
        return None
    base = w.base
    transposed = isinstance(base, np.ndarray) and base.ndim == 2 and base.shape == w.shape[::-1]
    return "head" if transposed else "blocks"


def default_route(kind, m):
    """The route where none was measured: for a weight matrix the panels (1 to PANEL_ROWS_MAX rows; one row is
    a matrix-vector product either way), then one BLAS call on all cores; for the scores, turned round for 2 to
    PANEL_ROWS_MAX queries, else plain."""
    if kind == "scores":
        return "turned round" if 2 <= m <= PANEL_ROWS_MAX else "plain"
    return "panels" if m <= PANEL_ROWS_MAX else "one call"


def route_of(kind, m):
    """The route a product of this kind and m rows takes: the one chosen for this machine (`use_routes`), or
    the default for an m or a kind that was not measured."""
    table = _routes.get(kind, ())
    return table[m - 1] if m <= len(table) else default_route(kind, m)


def use_routes(table):
    """Take the routes of `table`, {kind: [route for m = 1, 2, ...]} (speed/routes.py chooses and checks them);
    {} for the defaults; anything else it holds (its worker count: speed/routes.use) is not a route. Returns the
    routes taken before, in the same form."""
    global _routes
    before, _routes = _routes, {kind: list(table[kind]) for kind in table if kind in KINDS}
    return before


def matmul(x, w):
    """x @ w for x [m, n_in] and w [n_in, n_out] float32: the same product, by the route measured fastest for
    this kind of matrix and this m on this machine (`route_of`; speed/routes.py measures them), see `multiply`.

    A stack of products x [n_stack, m, n_in] @ w [n_stack, n_in, n_out] with w a transposed view (attention's
    q @ k.T) takes a route of its own (`scores`). A w that is neither stored by column nor by row (a strided
    view) gets plain x @ w.
    """
    kind = kind_of(x, w)
    if kind is None:
        return x @ w  # [m, n_out]
    _remember(kind, w)
    return multiply(x, w, route_of(kind, x.shape[-2]), kind)


def multiply(x, w, route, kind):
    """x @ w by the route named (of ROUTES for a weight matrix, of SCORE_ROUTES for the scores, or PADDED + a
    larger row count, whose own route is then taken):

    - "panels": the columns split between this process and the helper processes where they run
      (`second_core.for_matrix`), each share multiplied panel by panel (`columns`);
    - "vectors": the same split, each share panel by panel, each panel as m matrix-vector products (one call:
      NumPy's matmul loops over the panels, then the rows, so a panel is read from memory once, then from the
      core's cache; the m products of a whole share, one after the other, read it m times from memory);
    - "halves": the same split, each share as one BLAS call on its core;
    - "one call": one BLAS call on every core (`second_core.all_cores`), the helpers asleep.

    Every route adds the same products, in another order: the same numbers to float32 rounding."""
    m = x.shape[-2]
    if route.startswith(PADDED):
        rows = int(route[len(PADDED):])
        padded = np.zeros(x.shape[:-2] + (rows, x.shape[-1]), dtype=x.dtype)  # [..., rows, n_in], the last zero
        padded[..., :m, :] = x
        return np.ascontiguousarray(multiply(padded, w, route_of(kind, rows), kind)[..., :m, :])
    if kind == "scores":
        return scores(x, w, route)
    if route == "one call" or m > PANEL_ROWS_MAX:
        second_core.all_cores()
        return x @ w  # [m, n_in] @ [n_in, n_out] -> [m, n_out]: one BLAS call, on all cores
    how = HOWS.index(route)
    m, n_out = x.shape[0], w.shape[1]
    y = np.empty((m, n_out), dtype=np.result_type(x, w))  # [m, n_out]
    # for_matrix checks w (float32, big, read-only); x must be float32 to go into the helpers' shared rows
    share = second_core.for_matrix(w, columns, PANEL_ROWS_MAX) if x.dtype == np.float32 else None
    if share is None:
        columns(x, w, 0, n_out, y, how)  # every column here
        return y
    team, key, transposed = share
    width = panel_width(w.shape[0], m) if w.flags.f_contiguous else ROW_EDGE  # (`by_rows`: a share's start)
    bounds = [width * panel for panel in second_core.shares(n_out // width, len(team) + 1)]  # whole panels each
    bounds[-1] = n_out  # the last share takes the columns of no whole panel (wte.T's last few)
    second_core.run_shared(team, bounds, lambda helper, begin, end: helper.post(x, key, transposed, begin, end, how),
                           lambda begin, end: columns(x, w, begin, end, y[:, begin:end], how),
                           lambda begin, end: y[:, begin:end])  # the first share here, one per helper
    return y


def _remember(kind, w):
    """Note a big product's matrix (or, for the scores, its shape), for speed/routes.py to time the routes on:
    the matrices a model really multiplies, at the sizes it has. Weakly: a freed model is forgotten."""
    if kind == "scores":
        if w.nbytes >= second_core.MIN_BYTES // 4:
            _met_scores[(w.shape[0], w.shape[1])] = w.shape[2]
    elif w.nbytes >= second_core.MIN_BYTES:
        owner = w.base if kind == "head" else w
        if _met[kind].get(id(owner)) is not owner:  # once: a weak entry made at every product showed in a step
            _met[kind][id(owner)] = owner


def columns(x, w, begin, end, out, how=0):
    """out = x @ w[:, begin:end] for out [m, end - begin] and m <= PANEL_ROWS_MAX: columns begin .. end of the
    product, on one core (or on BLAS's threads, where no helper runs), the way HOWS[how] says: panel by panel,
    each panel one small matrix-matrix product ("panels") or m matrix-vector products ("vectors"), or as one
    BLAS call ("halves"). A w stored row by row (C order: where speed/layouts.py measured it faster, or a
    test's) has no panels: `by_rows` multiplies it, blocks of its rows in their place."""
    m, n_in = x.shape
    if not w.flags.f_contiguous:  # w stored row by row
        by_rows(x, w[:, begin:end], out, HOWS[how])  # [n_in, n]: each row's part contiguous
        return
    w_t = w.T[begin:end]  # [n, n_in]: w's columns, each one contiguous row of w.T
    if m == 1:
        np.matmul(w_t, x[0], out=out[0])  # [n, n_in] @ [n_in] -> [n]: BLAS's matrix-vector product
        return
    if HOWS[how] == "halves":
        np.matmul(x, w[:, begin:end], out=out)  # [m, n_in] @ [n_in, n] -> [m, n]: BLAS's general kernel
        return
    width = panel_width(n_in, m)
    n_full = (end - begin) // width * width  # the columns in whole panels; the rest (wte.T's last few) after
    panels = w_t[:n_full].reshape(-1, width, n_in)  # [n_panels, width, n_in]: views, each panel's rows contiguous
    if HOWS[how] == "vectors":  # each panel as m matrix-vector products, while the panel is in the core's cache
        product = np.matmul(panels[:, None], x[:, :, None])  # [n_panels, 1, width, n_in] @ [m, n_in, 1] -> ...
        product = product[..., 0]  # [n_panels, m, width, 1] -> [n_panels, m, width]
    else:  # each panel as one small matrix-matrix product
        product = np.matmul(x, panels.transpose(0, 2, 1))  # [m, n_in] @ [n_panels, n_in, width] -> [n_panels, m, width]
    out[:, :n_full] = product.transpose(1, 0, 2).reshape(m, n_full)  # panel p holds columns p * width ...
    if n_full < end - begin:
        out[:, n_full:] = (w_t[n_full:] @ x.T).T  # [m, n - n_full]


def row_block(n_in: int) -> int:
    """Rows of w per block for "panels" by a w [n_in, n] stored row by row, in chunks of ROW_BLOCK_COLUMNS columns
    (each row's part a long stream): the most, up to 64, dividing n_in, that fit in ROW_BLOCK_BYTES, the core's own
    cache: 32 for every GPT-2. Not the share's width: a column's sum is added in the same blocks in any share."""
    rows = 64
    while rows > 1 and (n_in % rows or rows * ROW_BLOCK_COLUMNS * 4 > ROW_BLOCK_BYTES):
        rows //= 2
    return rows


def by_rows(x, w, out, how):
    """out = x @ w for x [m, n_in] and w [n_in, n] stored row by row (C order, or the columns of such a matrix:
    each row's part contiguous), the way `how` (of HOWS) says:

    - "vectors", and any one row: m matrix-vector products, BLAS's kind that streams w row by row (on the AVX2
      machine, one thread, it read c_attn, c_fc and wte faster than the column-major layout's dot-product kind);
    - "panels": w in blocks (`row_block`), each read from memory once and multiplied by every row of x's matching
      part from the core's cache (m matrix-vector products a block, in one np.matmul that loops block by block),
      then each column's partial products summed over the blocks: the same products added in another order;
    - "halves": one BLAS call.
    """
    m, n_in = x.shape
    ragged = w.shape[1] % ROW_EDGE  # the last columns past a whole ROW_EDGE: a product of their own, the same
    if ragged and w.shape[1] > ragged:  # in any share (BLAS adds a ragged edge in its own way, and it would
        by_rows(x, w[:, :-ragged], out[:, :-ragged], how)  # move the columns it reaches with the share's width)
        by_rows(x, w[:, -ragged:], out[:, -ragged:], how)
        return
    if m == 1 or how == "vectors":
        for row in range(m):
            np.matmul(x[row], w, out=out[row])  # [n_in] @ [n_in, n] -> [n]
        return
    if how == "halves":
        np.matmul(x, w, out=out)  # [m, n_in] @ [n_in, n] -> [m, n]
        return
    rows, columns = row_block(n_in), min(w.shape[1], ROW_BLOCK_COLUMNS)
    n_blocks, n_chunks = n_in // rows, w.shape[1] // columns  # blocks of rows, chunks of columns
    n_full = n_chunks * columns
    x_blocks = np.ascontiguousarray(x.reshape(m, n_blocks, rows).transpose(1, 0, 2))  # [n_blocks, m, rows]
    w_blocks = w[:, :n_full].reshape(n_blocks, rows, n_chunks, columns)  # [n_blocks, rows, n_chunks, columns]
    w_blocks = w_blocks.transpose(0, 2, 1, 3)  # [n_blocks, n_chunks, rows, columns]: views, no copy
    partial = np.matmul(x_blocks[:, None, :, None], w_blocks[:, :, None])  # [n_blocks, n_chunks, m, 1, columns]
    summed = np.sum(partial[:, :, :, 0], axis=0)  # [n_chunks, m, columns]: over the blocks of rows
    out[:, :n_full] = summed.transpose(1, 0, 2).reshape(m, n_full)  # chunk c holds columns c * columns ...
    if n_full < w.shape[1]:
        by_rows(x, w[:, n_full:], out[:, n_full:], how)  # the last columns, a chunk of their own


def scores(x, w, route):
    """x @ w for x [n_stack, m, n_in] and w [n_stack, n_in, n_out] a transposed view (attention's q @ k.T), by
    the route named: "turned round" (`turned_round`), "plain" (x @ w, BLAS handed the transposed operand) or
    "vectors" (each query a matrix-vector product by k, stored row by row). A contiguous array."""
    if route == "turned round":
        return turned_round(x, w)
    if route == "vectors":
        k = w.transpose(0, 2, 1)  # [n_stack, n_out, n_in]: rows of n_in numbers, one after the other
        return np.matmul(k[:, None], x[..., None])[..., 0]  # [n_stack, m, n_out, 1] -> [n_stack, m, n_out]
    return x @ w  # [n_stack, m, n_out]


def turned_round(x, w):
    """x @ w computed as (w.T @ x.T).T, for x [n_stack, m, n_in] and w [n_stack, n_in, n_out] a transposed view:
    w.T is then stored row by row and x.T is copied to a small contiguous array, so BLAS sees no transposed
    operand (attention's scores for a few queries; see the module docstring). Returns a contiguous array."""
    x_t = np.ascontiguousarray(x.transpose(0, 2, 1))  # [n_stack, n_in, m]: a copy, m columns
    product = np.matmul(w.transpose(0, 2, 1), x_t)  # [n_stack, n_out, n_in] @ [n_stack, n_in, m] -> [.., n_out, m]
    return np.ascontiguousarray(product.transpose(0, 2, 1))  # [n_stack, m, n_out]


def kv_buffer(shape):
    """np.empty(shape, dtype=np.float32) for a KV cache buffer, [n_layer, 2, n_head, n_ctx, head_dim]: where the
    helpers share a step's heads (`head_workers`), in memory they can map too (a memfd: speed/shared_cache.py), so
    that `share_heads` hands them shares of the heads without a copy; elsewhere this process's own memory, which
    Linux gives 2 MB pages where shared memory mostly gets 4 KB ones, and attention reads it faster (a prompt's
    heads still go to the helpers, with copies of their keys and values: second_core.for_heads).
    `python tools/compare_llama_cpp.py --threads 2`'s "attention over the cache" times it."""
    nbytes = 4 * int(np.prod(shape))
    if head_workers() == 1 or nbytes < second_core.MIN_BYTES:  # (1 also where no helper can run)
        return np.empty(shape, dtype=np.float32)
    try:
        memory, fd = shared_cache.memory_file(nbytes)
    except OSError as error:  # memfd_create missing (ENOSYS: an old kernel, a sandbox), no memory (ENOMEM)
        why = second_core.error_text(error)
        second_core.give_up(f"the KV cache cannot be shared with the helper processes ({why})")
        memory, fd = None, None
    if memory is None:  # (out of the except: a MemoryError here is no error "during" that one)
        return np.empty(shape, dtype=np.float32)
    return shared_cache.shared_array(memory, fd, nbytes).reshape(shape)


def use_head_workers(count):
    """Share attention's heads among `count` processes from now on (None: all the workers), as speed/routes.py
    measured them: a step's attention reads the whole KV cache too, but in a small product per head, and
    whether a helper's share of them pays for its hand-over is the machine's to say, apart from the weights'.
    Returns the count taken before."""
    global _head_workers
    before, _head_workers = _head_workers, count
    return before


def head_workers():
    """How many processes share attention's heads: the count `use_head_workers` took, at most second_core.workers()
    (all of them where none was taken)."""
    return min(_head_workers or second_core.workers(), second_core.workers())


def share_heads(attend, q, k, v, mask):
    """attend(q, k, v, mask) for q [n_head, m, head_dim] and k, v [n_head, n_keys, head_dim], views of a
    `kv_buffer`: the heads split between this process and head_workers() - 1 helper processes (a prompt's,
    more than PANEL_ROWS_MAX queries, among every worker: see the module docstring), each share on one core,
    BLAS on one thread in each (a prompt's next product gives BLAS its threads back). Each head is computed by
    the same function in either process, so sharing changes no bit. Returns [n_head, m, head_dim]."""
    n_head, m = q.shape[0], q.shape[1]
    count = head_workers() if m <= PANEL_ROWS_MAX else second_core.workers()  # a prompt's heads: every worker's
    met = _met_heads.get((n_head, q.shape[2]), (None, 0))[1]
    _met_heads[(n_head, q.shape[2])] = (attend, max(met, k.shape[1]))
    share = second_core.for_heads(attend, q, k, v, mask) if n_head > 1 and count > 1 else None
    if share is None:
        return attend(q, k, v, mask)  # [n_head, m, head_dim]
    team, key, cache = share
    team = team[: count - 1]  # the helpers that share the heads
    out = np.empty(q.shape, dtype=np.float32)  # [n_head, m, head_dim]

    def here(begin, end):  # heads begin .. end - 1, in this process
        out[begin:end] = attend(q[begin:end], k[begin:end], v[begin:end], mask)

    second_core.run_shared(team, second_core.shares(n_head, len(team) + 1),
                           lambda helper, begin, end: helper.post_heads(key, q[begin:end], k[begin:end], v[begin:end],
                                                                        mask, cache),
                           here, lambda begin, end: out[begin:end])  # the first heads here, a share per helper
    return out
