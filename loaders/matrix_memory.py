"""The blocks' weight matrices in one piece of memory, in 2 MB pages: where the loaders put them.

Machinery: read it after loaders/weights.py. A decoding step reads every weight once, from memory
(docs/BENCHMARKS.md), and each read goes through its address's page. Linux's pages are 4 KB unless a program
asks for 2 MB ones ("transparent huge pages"); every page a step touches needs its address translated, and a
step over 124M's block matrices (340 MB) touches 83,000 pages of 4 KB, or 162 of 2 MB. NumPy asks for 2 MB
pages for every array of 4 MB or more (NUMPY_MADVISE_HUGEPAGE), but Linux can give one only to a 2 MB stretch
that starts at a multiple of 2 MB and lies wholly inside the array: a matrix of its own keeps its two ends in
4 KB pages, and 124M's 768 x 768 matrices (2.25 MB each) get no 2 MB page at all. So the loaders put every
block matrix into ONE array that starts at a 2 MB boundary (`MatrixMemory`), in fresh memory mapped for it and
advised to Linux as wanting 2 MB pages (`fresh_memory`; memory the process had used before keeps the 4 KB
pages it was given): all of it can be in 2 MB pages. wte (the LM head, 154 MB for 124M) stays an array of its
own: its ends are at most 3% of it. docs/BENCHMARKS.md's design timings time a step's products both ways
(tools/small_parts.py).

Nothing else changes: the same shapes, layouts (column-major or not, as speed/layouts.py chose) and values;
each matrix starts at a multiple of ALIGN bytes (a cache line). Where Linux gives no 2 MB pages (another
system; "never" in /sys/kernel/mm/transparent_hugepage/enabled) it is one array like any other. Read-only once
filled (`seal`), as every weight is: the helper processes share only such matrices.

    memory = MatrixMemory({"h0/mlp/c_fc/w": ((768, 3072), True)})   # name -> (shape, column-major?)
    w = memory.empty("h0/mlp/c_fc/w")   # [768, 3072] float32, column-major: a view into the one array
    w[...] = values                     # the loader fills it
    memory.seal()                       # the array and every view read-only
"""

import errno
import math
import mmap
import os

import numpy as np

from loaders.weights import is_block_matrix, stored_by_column

HUGE_PAGE = 2 << 20  # bytes in one of Linux's 2 MB pages (x86-64's; the start is aligned to it)
ALIGN = 64  # each matrix starts at a multiple of this many bytes: a cache line, one AVX-512 load
TRANSPARENT_HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/enabled"  # Linux's rule for 2 MB pages, if it has them


class MatrixMemory:
    """One array holding the float32 matrices `layouts` names ({name: (shape, column_major)}), each a view."""

    def __init__(self, layouts: dict):
        sizes = {name: 4 * math.prod(shape) for name, (shape, _) in layouts.items()}
        offsets, end = {}, 0
        for name, size in sizes.items():  # one after the other, each at a multiple of ALIGN
            offsets[name], end = end, end + -(-size // ALIGN) * ALIGN
        self.block = fresh_memory(end + HUGE_PAGE)  # [bytes]
        start = -self.block.ctypes.data % HUGE_PAGE  # the first 2 MB boundary inside it
        self.layouts, self.offsets, self.start, self.views = layouts, offsets, start, []

    def empty(self, name):
        """A new view [shape] into the one array for `name` (unfilled), or None for a name not in `layouts`."""
        if name not in self.layouts:
            return None
        shape, column_major = self.layouts[name]
        begin = self.start + self.offsets[name]
        flat = self.block[begin : begin + 4 * math.prod(shape)].view(np.float32)  # [n_in * n_out]
        view = flat.reshape(shape[::-1]).T if column_major else flat.reshape(shape)  # [n_in, n_out] either way
        self.views.append(view)
        return view

    def seal(self):
        """Make the array and every view of it read-only: nothing can change the weights through NumPy."""
        for array in (self.block, *self.views):
            array.flags.writeable = False


def fresh_memory(nbytes):
    """A new uint8 array [nbytes] in memory mapped for it alone, Linux asked for 2 MB pages in it (MADV_HUGEPAGE:
    it gives them where TRANSPARENT_HUGE_PAGES says "madvise" or "always"); where madvise has no such advice (not
    Linux), NumPy's own memory. No room for it (a memory limit: `ulimit -v`) is a MemoryError, as NumPy's is."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(nbytes, dtype=np.uint8)
    try:
        memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private: a fork copies it
    except OSError as error:
        if error.errno != errno.ENOMEM:
            raise
        raise MemoryError(f"Unable to map {nbytes / 2**30:.1f} GiB for the weight matrices") from error
    if os.path.exists(TRANSPARENT_HUGE_PAGES):  # a kernel built without them would refuse the advice
        memory.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(memory, dtype=np.uint8)  # unmapped when the last view of it is gone


def for_block_matrices(shapes: dict, layouts=None) -> MatrixMemory:
    """The MatrixMemory for the block matrices among `shapes` ({name: shape}), each stored as `layouts` says
    (loaders/weights.stored_by_column; None: the default, by column)."""
    return MatrixMemory({name: (tuple(shape), stored_by_column(name, layouts)) for name, shape in shapes.items()
                         if is_block_matrix(name)})
