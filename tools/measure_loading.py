"""Peak memory and time of loading a GPT-2 checkpoint, against the bytes of its weights (a tool; the goal: loading
in little more than the weights). Read loaders/weights.py's `read_tensor` (how a tensor is filled from the file),
loaders/tf_checkpoint.py and loaders/hf_folder.py first.

Writes random weights of each size as OpenAI's TF checkpoint and as a Hugging Face folder, then loads each in a fresh process and reports its peak resident memory and its time, next to
the time of reading the file's bytes (`cat`) from the same warm page cache, and the time of copying them into
one fresh array in a fresh process (the least that any loader which copies the weights into its own memory
can take: `cat` reuses one small buffer, a load must fault in fresh pages for every byte).

    python tools/measure_loading.py --sizes 124M,1558M --folder gpt2-load   # ~13 GB of disk at a time
    python tools/measure_loading.py --sizes 124M --json loading.json        # also write the numbers

Linux only: the peak comes from /proc, and the file is read by `cat`. A size is a released one or a model
folder (its shapes; the weights are random). Each size's files go into a new folder of their own inside --folder
(measure-loading-...), deleted before the next size is written: what --folder held stays, and a --folder this
run made is removed at the end if it is left empty. A size whose two checkpoints do not fit on --folder's disk is
refused before any is written; a disk that fills up anyway removes the partial files and names them. Of
--repeats loads of each file, the peak is the largest (the memory a load may need) and the time the best (noise
only ever adds time). Not a test (it takes minutes and gigabytes); tools/make_readme_figures.py runs it with
--json and writes docs/BENCHMARKS.md's "Loading weights" table.
"""

import json as json_module
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

# `python tools/measure_loading.py` puts tools/ first on the path: put the repository's root there too (the
# loaders it measures, and tools/model_files.py, the writers of the two file formats)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.benchmark import hparams_of, model_name  # noqa: E402
from loaders.safe_files import new_folders, remove_if_empty, write_atomically  # noqa: E402
from tools.model_files import flat_params, hf_config, hf_name, write_safetensors, write_tf_checkpoint  # noqa: E402
from command_line.flags import as_whole_number, errors_as_one_line, first_existing  # noqa: E402
from command_line.scripts import as_names, check_output_file, check_output_folder, run_script  # noqa: E402
from loaders.random_weights import bytes_needed, check_memory_for, random_params  # noqa: E402


def measure(code):
    """(peak RSS in bytes, seconds) of running `code` in a fresh Python. The peak is VmHWM from /proc: a
    child's getrusage maxrss would start from its parent's, since the high-water mark survives fork."""
    script = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
              f"from loaders import hf_folder, tf_checkpoint, weights\nstart = time.perf_counter()\n{code}\n"
              f"seconds = time.perf_counter() - start\n"
              f"hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM')][0].split()[1]\n"
              f"print(seconds, hwm)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    return int(out[-1]) * 1024, float(out[-2])


def fresh_copy_code(path):
    """Code that reads the file's bytes into one fresh NumPy array: what any loader that copies the weights into
    its own memory must at least do (page faults on fresh memory included), with no checks and no reordering."""
    return (f"import os\nimport numpy as np\narray = np.empty(os.path.getsize({str(path)!r}), dtype=np.uint8)\n"
            f"with open({str(path)!r}, 'rb') as file:\n    file.readinto(memoryview(array))")


def cat_seconds(path):
    start = time.perf_counter()
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


@contextmanager
def own_folder(parent):
    """Inside: a new folder in `parent` that this run made (measure-loading-...), removed whole on the way out;
    whatever else `parent` holds is never touched."""
    folder = Path(tempfile.mkdtemp(dir=parent, prefix="measure-loading-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@contextmanager
def named_if_it_fails(path, what):
    """Inside: writing `path`; an OSError (a full disk's names no file) names it and says it will be removed."""
    try:
        yield
    except OSError as error:
        raise OSError(error.errno, error.strerror, f"{path} ({what}, removed)") from None


def check_disk_for(size, folder):
    """ValueError unless the disk of `folder` (or of its first existing parent) has room for size's two
    checkpoints (twice the float32 weights)."""
    needed = 2 * bytes_needed(hparams_of(size))  # a little more than twice the weights: a margin
    free = shutil.disk_usage(first_existing(folder)).free
    if needed > free:
        raise ValueError(f"--folder {folder}: {model_name(size)}'s two checkpoints need {needed / 1e9:.1f} GB and "
                         f"its disk has {free / 1e9:.1f} GB free; free some space or name a folder on another disk")


def write_both(hparams, root):
    """size's random weights written under root as a TF checkpoint (root/tf) and an HF folder (root/hf); returns
    the bytes of the weights."""
    arrays = flat_params(random_params(hparams, np.random.default_rng(0)))
    with named_if_it_fails(root / "tf", "the TF checkpoint being written"):
        weights = write_tf_checkpoint(root / "tf", arrays, hparams)
    hf = root / "hf"
    with named_if_it_fails(hf / "model.safetensors", "the Hugging Face checkpoint being written"):
        hf.mkdir()
        write_atomically(hf / "config.json", json_module.dumps(hf_config(hparams)))
        write_safetensors(hf / "model.safetensors", {hf_name(n, "transformer."): a for n, a in arrays.items()}, "F32")
    return weights


def measure_size(size, root, repeats):
    """One row per layout: {"size", "layout", "weights", "empty_python", "peak", "seconds", "fresh_copy", "cat"}
    (bytes and seconds; fresh_copy: the best time of fresh_copy_code). The files are written under root (a
    folder this run made: own_folder), measured, and deleted with it."""
    hparams = hparams_of(size)
    weights, hf = write_both(hparams, root), root / "hf"
    empty_python, _ = measure("pass")
    rows = []
    for layout, code, data_file in [
        ("TF checkpoint", f"tf_checkpoint.load_gpt2_params_from_tf_ckpt({str(root / 'tf' / 'model.ckpt')!r}, "
                          f"weights.read_openai_hparams({str(root / 'tf' / 'hparams.json')!r}))",
         root / "tf" / "model.ckpt.data-00000-of-00001"),
        ("HF safetensors", f"hf_folder.load_hf_gpt2({str(hf)!r})", hf / "model.safetensors"),
    ]:
        cat_seconds(data_file)  # warm the page cache
        cat = min(cat_seconds(data_file) for _ in range(2))
        loads, copies = [], []
        for _ in range(repeats):  # in turns, so that the machine's moods hit both alike
            loads.append(measure(code))
            copies.append(measure(fresh_copy_code(data_file))[1])
        rows.append({"size": model_name(size), "layout": layout, "weights": weights, "empty_python": empty_python,
                     "peak": max(peak for peak, _ in loads), "seconds": min(seconds for _, seconds in loads),
                     "fresh_copy": min(copies), "cat": cat})
    return rows


def main(sizes="124M", folder=None, repeats=2, json=None):
    """Measure each size's loads and print them (see the module docstring).

    Args:
        sizes: comma-separated sizes or model folders.
        folder: where the files are written, in a new folder of their own (then deleted; nothing else in
            folder is touched); default: gpt2-load in the temporary folder.
        repeats: loads of each file, each in a fresh process.
        json: a file to write the rows into, for make_readme_figures.py.
    """
    with errors_as_one_line():  # every flag before any work: one line `error: ...`, exit code 2
        if not Path("/proc/self/status").is_file():
            raise ValueError("tools/measure_loading.py measures on Linux only: it reads a process's peak memory "
                             "from /proc")
        sizes = as_names(sizes, "--sizes")
        folder = Path(tempfile.gettempdir()) / "gpt2-load" if folder is None else folder
        folder = check_output_folder(folder, "--folder")
        for size in sizes:  # one at a time: each size's weights and files are gone before the next is made
            check_memory_for([(size, hparams_of(size))])
            check_disk_for(size, folder)
        repeats = as_whole_number(repeats, "--repeats", 1)
        json_path = check_output_file(json, "--json")
    rows, made = [], new_folders(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for size in sizes:
            with own_folder(folder) as root:
                rows += measure_and_print(size, root, repeats)
    finally:
        remove_if_empty(made)  # a --folder this run made, and only if nothing else was put there meanwhile
    if json_path:
        write_atomically(json_path, json_module.dumps({"loads": rows, "repeats": repeats}, indent=1))


def measure_and_print(size, root, repeats):
    """measure_size's rows for one size, printed as they come."""
    size_rows = measure_size(size, root, repeats)
    first = size_rows[0]
    print(f"{first['size']}: weights {first['weights'] / 1e9:.2f} GB; an empty Python "
          f"{first['empty_python'] / 1e6:.0f} MB")
    for row in size_rows:
        print(f"  {row['layout']}: peak RSS {row['peak'] / 1e9:.2f} GB = {row['peak'] / row['weights']:.2f}x the "
              f"weights ({(row['peak'] - row['empty_python']) / row['weights']:.2f}x above an empty Python); "
              f"{row['seconds']:.1f} s = {row['seconds'] / row['cat']:.2f}x reading the file ({row['cat']:.1f} s); "
              f"copying the file into fresh memory {row['fresh_copy']:.1f} s = "
              f"{row['fresh_copy'] / row['cat']:.2f}x")
    return size_rows


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/measure_loading.py")
