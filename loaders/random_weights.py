"""Random GPT-2 weights of any size, for tests, tools and benchmarks: no download needed.

`random_params(hparams, rng)` gives what the loaders give (utils.load_encoder_hparams_and_params): float32,
read-only arrays in picoGPT's nested layout, the blocks' matrices stored column-major (speed/products.py says
why; the math does not care), or as speed/layouts.py measured them, where a tool asks.

`check_memory_for([(name, hparams), ...])` comes first: a folder holding only a config.json within the loaders' limits
(192 layers x 8192 wide) names about 600 GB of weights. The bytes are counted from the shapes and compared with
what the machine has left (`available_memory`) before one array is made: one line, not a MemoryError minutes in.
"""

import math
import os

import numpy as np

from loaders.matrix_memory import for_block_matrices
from loaders.weights import gpt2_param_shapes, read_only, stored_by_column

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def random_params(hparams: dict, rng: np.random.Generator, std: float = 0.02, layouts=None) -> dict:
    """Random float32 weights of GPT-2's shapes in the loaders' layout: `layouts` ({"blocks": layout, "head":
    layout}, speed/layouts.py; None: its default, column-major matrices; the timing tools pass this process's,
    measured as the loaders' are: tools/benchmark.measured_random_params); the same numbers in any layout.

    Every term is non-trivial: biases are random and layer-norm gains and shifts are not 1 and 0, so a
    forward pass that forgets one of them gives different logits. Every array is read-only, as the loaders'
    are. Each block matrix is drawn, then put in its layout in the one array of block matrices
    (loaders/matrix_memory.py), so the memory needed is the weights plus one matrix (1558M: 6.2 GB, not twice that).
    """
    n_vocab, n_ctx, n_embd, n_layer = (hparams[k] for k in ("n_vocab", "n_ctx", "n_embd", "n_layer"))
    memory = for_block_matrices(gpt2_param_shapes(hparams), layouts)

    def normal(*shape, scale=std):
        return read_only(scale * rng.standard_normal(shape, dtype=np.float32))  # float32: a Python float adapts

    def norm():
        return {"g": read_only(1 + normal(n_embd, scale=0.1)), "b": normal(n_embd, scale=0.1)}

    def dense(name, n_in, n_out):  # in its layout, in the one array of block matrices: one matrix drawn at a time
        w = memory.empty(name)  # [n_in, n_out]
        w[...] = normal(n_in, n_out)
        return {"w": w, "b": normal(n_out)}  # w read-only once all are drawn (memory.seal)

    blocks = [
        {
            "ln_1": norm(),
            "attn": {"c_attn": dense(f"h{i}/attn/c_attn/w", n_embd, 3 * n_embd),
                     "c_proj": dense(f"h{i}/attn/c_proj/w", n_embd, n_embd)},
            "ln_2": norm(),
            "mlp": {"c_fc": dense(f"h{i}/mlp/c_fc/w", n_embd, 4 * n_embd),
                    "c_proj": dense(f"h{i}/mlp/c_proj/w", 4 * n_embd, n_embd)},
        }
        for i in range(n_layer)
    ]
    memory.seal()
    wte, wpe = normal(n_vocab, n_embd), normal(n_ctx, n_embd, scale=0.01)
    wte = read_only(np.asfortranarray(wte)) if stored_by_column("wte", layouts) else wte
    return {"wte": wte, "wpe": wpe, "blocks": blocks, "ln_f": norm()}  # in its layout already


def bytes_needed(hparams: dict) -> int:
    """Bytes that random_params and a run of the model take at most: the float32 weights, the largest matrix twice
    more (drawn, then scaled or made column-major), and a whole context's keys and values. 124M: 0.9 GB."""
    n_embd, n_ctx, n_layer = hparams["n_embd"], hparams["n_ctx"], hparams["n_layer"]
    weights = 4 * sum(math.prod(shape) for shape in gpt2_param_shapes(hparams).values())
    largest = 4 * n_embd * max(4 * n_embd, hparams["n_vocab"])  # c_fc's or wte
    return weights + 2 * largest + 4 * 2 * n_layer * n_ctx * n_embd


def _meminfo_available():
    """Linux's estimate of the memory that can be taken without swapping (MemAvailable), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as file:
            fields = dict(line.split(":", 1) for line in file)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _cgroup_room():
    """What a cgroup v2 memory.max leaves above memory.current for this process's group, or None (no limit)."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as file:
            group = "/sys/fs/cgroup" + file.read().split("0::", 1)[1].split("\n", 1)[0]
        with open(f"{group}/memory.max", encoding="ascii") as limit, open(f"{group}/memory.current") as used:
            return int(limit.read()) - int(used.read())
    except (OSError, IndexError, ValueError):  # no cgroup v2, or "max": no limit
        return None


def _address_space_room():
    """What `ulimit -v` (RLIMIT_AS) leaves above this process's size, or None (no limit, or Windows: no such thing)."""
    if os.name == "nt":
        return None
    import resource  # POSIX only

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm", encoding="ascii") as file:
            return limit - int(file.read().split()[0]) * PAGE
    except (OSError, ValueError):
        return limit


def available_memory():
    """Bytes this process may still take: the least of MemAvailable, a cgroup's room and ulimit -v's room. Where
    none is known (macOS, Windows) the physical memory (os.sysconf), and None if that is unknown too."""
    known = [room for room in (_meminfo_available(), _cgroup_room(), _address_space_room()) if room is not None]
    if known:
        return max(0, min(known))
    try:
        return os.sysconf("SC_PHYS_PAGES") * PAGE
    except (AttributeError, ValueError, OSError):
        return None


def check_memory_for(models, available=None):
    """ValueError, before anything is allocated, unless random weights of `models` ([(name, hparams)]) fit
    together in `available` bytes (default: available_memory(); where that is unknown, every size passes).

    check_memory_for([("124M", HPARAMS["124M"])]) passes on a laptop; a config.json of 192 layers x 8192 wide
    names 675 GB and is refused in one line naming the model, the bytes it needs and the bytes there are.
    """
    needed = sum(bytes_needed(hparams) for _, hparams in models)
    room = available_memory() if available is None else available
    if room is not None and needed > room:
        raise ValueError(f"{' and '.join(str(name) for name, _ in models)}: random weights of these shapes need "
                         f"{needed / 1e9:.1f} GB of memory and this machine has {room / 1e9:.1f} GB available; "
                         f"choose a smaller model (fewer layers, a narrower n_embd) or free some memory")
