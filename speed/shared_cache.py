"""The KV cache's memory, shared with the helper processes: a memfd each helper maps, and what a fork does to it.

Read speed/second_core.py first (the helper processes, and why they attend with some of the heads): this file
is the memory those heads are read from. It needs only NumPy and the standard library.

A cache is made after the helpers were forked and written by every pass, so a helper cannot see it through
fork's copy of memory. products.kv_buffer makes its buffer here instead: a memfd (a file in memory), which
a helper maps through this process's descriptor, /proc/PARENT/fd/FD (second_core.Helper._cache). Freed here, its
descriptor closes (`forget`), and each helper drops its mapping when it maps the next cache. A helper forked
later inherits neither the mapping (MADV_DONTFORK: it would keep a freed cache alive) nor the descriptors
(`close_cache_descriptors`).

A program's own fork (multiprocessing's workers, say) is another matter: its child must get a private copy of
each cache, as it would of np.empty memory. The fork hooks at the end do that (`before_fork`,
`after_fork_in_child`); the helpers' own forks skip them (`making_helper`).
"""

import ctypes
import itertools
import mmap
import os
import sys
import weakref
from typing import NamedTuple

import numpy as np

SHMEM_HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"  # Linux's rule for shared memory's pages
MEMFD_NAME = "kv-cache"  # the name of a shared buffer's memory file, as /proc/PID/fd and maps show it

shared = {}  # id(mmap) -> the SharedBuffer of each live shared buffer
making_helper = False  # True while this process forks a helper (which needs no copy of the caches)
_snapshots = []  # (array, its copy) for each live shared buffer, from just before a fork to just after
_numbers = itertools.count(1)  # a buffer's number: an fd is reused once closed, a number never


class SharedBuffer(NamedTuple):
    """A live shared buffer: what a helper needs to map it, and what this process needs to free it."""

    number: int  # never reused (an fd is, once closed)
    fd: int  # this process's descriptor of the memfd
    nbytes: int
    address: int  # where its memory starts here
    flat: weakref.ref  # to its [nbytes / 4] array (the fork hooks copy it)
    finalizer: weakref.finalize  # closes fd when the buffer is freed


def shared_array(memory, fd, nbytes):
    """The float32 array [nbytes / 4] over `memory` (a `memory_file`), registered as a shared buffer."""
    flat = np.frombuffer(memory, dtype=np.float32)  # [nbytes / 4], owns nothing: the mmap does
    shared[id(memory)] = SharedBuffer(next(_numbers), fd, nbytes, flat.ctypes.data, weakref.ref(flat),
                                      weakref.finalize(memory, forget, id(memory), fd))
    return flat


def memory_file(nbytes):
    """(a shared mapping of a new memfd of nbytes, its descriptor): memory a helper can map too."""
    fd = os.memfd_create(MEMFD_NAME)
    try:
        os.ftruncate(fd, nbytes)
        memory = mmap.mmap(fd, nbytes)  # MAP_SHARED: the helper's mapping sees the same pages
        memory.madvise(mmap.MADV_DONTFORK)
        ask_for_huge_pages(memory)
    except BaseException:
        os.close(fd)
        raise
    return memory, fd


def ask_for_huge_pages(memory):
    """Ask Linux for 2 MB pages for a mapping of a cache buffer (in this process, and in each helper). Shared
    memory gets them only where SHMEM_HUGE_PAGES says "advise" (or "always"); with the usual "never" the hint
    changes nothing and the pages stay 4 KB (the 2 MB pages of this process's own memory are read faster)."""
    if os.path.exists(SHMEM_HUGE_PAGES):  # a kernel built without huge pages would refuse the hint
        memory.madvise(mmap.MADV_HUGEPAGE)


def close_cache_descriptors():
    """Close this process's descriptors of shared memfds (in a helper just forked: its copies of the
    parent's, which would keep a freed cache's memory alive; Python's mmap holds a copy of its own of each)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the descriptor of the listing itself, closed by now
            continue
        if target.startswith(f"/memfd:{MEMFD_NAME} "):
            os.close(int(name))


def forget(key, fd):
    """A shared buffer was freed: close its descriptor (the memory goes when the helper's mapping does too)."""
    shared.pop(key, None)
    os.close(fd)


def before_fork():
    """Before a fork that is not a helper's (a program's own, such as multiprocessing's workers): a copy of
    every live shared buffer, which `after_fork_in_child` puts back in the child's private memory."""
    global _snapshots
    flats = [] if making_helper else [buffer.flat() for buffer in shared.values()]
    _snapshots = [(flat, flat.copy()) for flat in flats if flat is not None]


def after_fork_in_parent():
    """The copies are the child's: the parent lets them go."""
    global _snapshots
    _snapshots = []


def after_fork_in_child():
    """In a child of a fork that is not a helper's: each cache buffer becomes the child's own, as np.empty memory
    would be after a fork. The mapping was not inherited (MADV_DONTFORK), so fresh private memory is mapped at
    the same address (every view of it stays valid) and the copy made before the fork is written into it. The
    child's copies of the descriptors are closed, and no buffer counts as shared here any more: a helper of
    the child's own would read the parent's memfd, not this memory."""
    global _snapshots
    if making_helper:
        return
    for flat, snapshot in _snapshots:
        address = _libc_mmap(flat.ctypes.data, flat.nbytes, mmap.PROT_READ | mmap.PROT_WRITE,
                             mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED, -1, 0)
        if address != flat.ctypes.data:
            raise OSError(ctypes.get_errno(), "could not map a KV cache buffer's memory in a forked child")
        flat[...] = snapshot
    for buffer in shared.values():
        buffer.finalizer.detach()  # it would close a descriptor number the child may reuse
        os.close(buffer.fd)
    shared.clear()
    _snapshots = []


def root(array):
    """The object at the bottom of array's chain of views (for a shared kv_buffer, its mmap)."""
    while isinstance(array, np.ndarray):
        array = array.base
    return array.obj if isinstance(array, memoryview) else array  # np.frombuffer's base: a view of the mmap



MAP_FIXED = 0x10  # Linux's flag (Python's mmap module does not name it): map at exactly the address given
_libc_mmap = ctypes.CDLL(None, use_errno=True).mmap if sys.platform == "linux" else None  # the C library's mmap
if _libc_mmap is not None:
    _libc_mmap.restype = ctypes.c_void_p
    _libc_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    os.register_at_fork(before=before_fork, after_in_parent=after_fork_in_parent, after_in_child=after_fork_in_child)
