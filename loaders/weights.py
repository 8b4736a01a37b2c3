"""What every weights reader checks, whatever the file format: the hyperparameters, GPT-2's parameter names and
shapes, and tensors read from a file straight into float32 arrays.

Read utils.py first (a model name becomes a folder, a folder becomes arrays). The two readers built on this
file come next: loaders/tf_checkpoint.py (OpenAI's TensorFlow checkpoint) and loaders/hf_folder.py (a Hugging Face folder,
config.json + model.safetensors). Both return the nested layout of OpenAI's checkpoint names (picoGPT's
layout): params["blocks"][i]["attn"]["c_attn"]["w"], all float32, each matrix stored by column or by row as
speed/layouts.py measured (`stored_by_column`; by default the blocks' matrices column-major).

A damaged or mismatched file is a CheckpointError whose one line names the file and what is wrong.
"""

import functools
import json
import math
import os
import re
import stat
from pathlib import Path

import numpy as np
from tqdm import tqdm

from loaders.messages import shown

MODEL_SIZES = ("124M", "355M", "774M", "1558M")  # OpenAI's releases, downloaded into a folder of that name


class CheckpointError(ValueError):
    """A weights file is missing, damaged or not what it claims to be; the message names the file.

    `path` and `problem` keep the two parts of the message apart, for a caller that words the advice itself."""

    def __init__(self, message, path=None, problem=None):
        super().__init__(message)
        self.path, self.problem = path, problem


def checkpoint_error(path, problem):
    """The CheckpointError for a damaged or incomplete file: it names the file, the problem, and what to do.

    A file reached through a link (a Hugging Face snapshot links each file to a blob) is named with the file
    the link points at: deleting the link would only bring the same damaged blob back. A file that is not there
    at all has nothing to delete: it is named with what to do instead. A file in a folder of the user's own (not
    models_dir/SIZE, not the Hub's cache) is not downloaded again: it is to be made or copied again."""
    if not os.path.lexists(path):
        return CheckpointError(
            f"{path}: {problem}. Copy it into that folder with the model's other files, or name a released size "
            f"(124M, ..., or gpt2 on the Hugging Face Hub), which main.py downloads whole", path, problem
        )
    to_delete, downloaded = "it", Path(path).parent.name in MODEL_SIZES  # where main.py puts OpenAI's files
    if os.path.islink(path):
        to_delete, downloaded = os.path.realpath(path), True  # a Hub snapshot's file: its blob, downloaded
        path = f"{path} (a link to {to_delete})"
    if not downloaded:  # a folder of the user's own: main.py downloads nothing into it
        return CheckpointError(f"{path}: {problem}. The file is damaged or incomplete: make or copy it again (this "
                               f"folder is not one main.py downloads into)", path, problem)
    return CheckpointError(
        f"{path}: {problem}. The file is damaged or incomplete: delete {to_delete} and run again to download it "
        f"afresh", path, problem
    )


def file_errors_as_checkpoint_errors(reader):
    """`reader`, whose OSError (a file it may not read, a folder where a file belongs, a failing disk) becomes a
    CheckpointError naming the file: the loaders raise only the project's own errors."""

    @functools.wraps(reader)
    def checked(path, *args, **kwargs):
        try:
            return reader(path, *args, **kwargs)
        except OSError as error:
            raise checkpoint_error(error.filename or path, f"it cannot be read ({error.strerror or error})") from None

    return checked


def read_small_file(path, max_bytes):
    """The bytes of the regular file at `path` if it has at most `max_bytes`; else a ValueError saying why not (a
    folder, a named pipe or a device such as /dev/zero, or too large), without the path: the caller names it.
    An OSError (missing, not allowed) is left to the caller too.

    The file is opened without waiting (an ordinary open of a named pipe waits for a writer forever) and
    checked on the opened descriptor, so what is read is what was checked."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ValueError("it is not a regular file (a folder, a named pipe or a device)")
        if status.st_size > max_bytes:
            raise ValueError(f"it has {status.st_size:,} bytes, more than the {max_bytes:,} it may have")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew while it was read
        raise ValueError(f"it has more than the {max_bytes:,} bytes it may have")
    return data


def read_small_json(path, max_bytes, where, remedy, **options):
    """json.loads(options) of the small file at `path` (`read_small_file`), or a ValueError in one line:
    "cannot read {where}: {why}; {remedy}" (missing, not a regular file, too large, not UTF-8 JSON, nested too
    deep). The caller then checks every field: this only says the file is JSON."""
    try:
        return json.loads(read_small_file(path, max_bytes).decode("utf-8"), **options)
    except (OSError, ValueError, RecursionError) as error:  # RecursionError: arrays nested 100,000 deep
        reason = getattr(error, "strerror", None) or str(error)[:200] or type(error).__name__
        raise ValueError(f"cannot read {where}: {reason}; {remedy}") from None


MAX_CONFIG_BYTES = 1 << 20  # config.json and hparams.json: GPT-2's are under 1 KB; a larger one is not a config


def read_json_file(path, what, max_bytes=MAX_CONFIG_BYTES):
    """The JSON value in the file at `path` (`what` it should be, for the message), read only if it has at
    most `max_bytes` bytes; else, or when it is not UTF-8 JSON (nested too deep, a number too long, ...),
    a CheckpointError naming the file."""
    path = Path(path)
    if not path.is_file():  # missing, a folder, or a pipe that would never end
        raise checkpoint_error(path, "file not found (or not a regular file)")
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise checkpoint_error(path, f"it has {size} bytes, more than the {max_bytes} a {what} may have")
        with open(path, "rb") as file:
            data = file.read(max_bytes + 1)
        return json.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise checkpoint_error(path, f"not a {what} ({type(error).__name__}: {str(error)[:200]})") from None


MAX_DIMENSION = 2**40  # no tensor of a GPT-2 is anywhere near: a larger size is damage, not a model


# The sizes this GPT-2 supports: a few times the largest release's (1558M: n_ctx 1024, n_embd 1600, n_head 25,
# n_layer 48, n_vocab 50,257), and below what would exhaust a learner's memory. The weights themselves must be in
# the file, but the context is not: a pass over a full context holds n_head x n_ctx^2 attention scores (float32),
# 64 heads x 4,096^2 x 4 bytes = 4.3 GB at these bounds, and the KV cache grows to n_layer x 2 x n_ctx x n_embd
# floats (1558M's shapes with 4,096 positions: 2.5 GB).
HPARAM_LIMITS = {"n_vocab": 262_144, "n_ctx": 4_096, "n_embd": 8_192, "n_head": 64, "n_layer": 192}


def check_hparams(hparams, path):
    """hparams with every size a positive whole number within HPARAM_LIMITS and n_head dividing n_embd;
    else a CheckpointError naming `path` (hparams.json or config.json) and what is wrong. A size beyond the
    bounds is not damage: the message says what is supported instead of asking for a new download."""
    if not isinstance(hparams, dict):
        raise checkpoint_error(path, f"it holds a JSON {type(hparams).__name__}, not an object of hyperparameters")
    for key, limit in HPARAM_LIMITS.items():
        value = hparams.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise checkpoint_error(path, f"{key} is {shown(value)}; it must be a whole number from 1 to {limit}")
        if value > limit:
            problem = f"{key} is {shown(value)}; this GPT-2 supports {key} from 1 to {limit}"
            raise CheckpointError(f"{path}: {problem} (a few times GPT-2 1558M's sizes, within a computer's memory; "
                                  f"see weights.HPARAM_LIMITS): use a model within them", path, problem)
    if hparams["n_embd"] % hparams["n_head"]:
        raise checkpoint_error(
            path, f"n_head={hparams['n_head']} does not divide n_embd={hparams['n_embd']}: heads split the width evenly"
        )
    return {key: hparams[key] for key in HPARAM_LIMITS}


def read_openai_hparams(path):
    """hparams.json -> the checked hparams (check_hparams)."""
    return check_hparams(read_json_file(path, "readable JSON hparams file"), path)


def gpt2_param_shapes(hparams):
    """{name: shape} of every GPT-2 parameter as it is used (the checkpoint's names without "model/").

    Example for 124M: "wte" (50257, 768), "h0/attn/c_attn/w" (768, 2304), "h11/mlp/c_proj/b" (768,).
    """
    n_embd = hparams["n_embd"]
    shapes = {"wte": (hparams["n_vocab"], n_embd), "wpe": (hparams["n_ctx"], n_embd)}
    for i in range(hparams["n_layer"]):
        shapes[f"h{i}/ln_1/g"] = (n_embd,)
        shapes[f"h{i}/ln_1/b"] = (n_embd,)
        shapes[f"h{i}/attn/c_attn/w"] = (n_embd, 3 * n_embd)
        shapes[f"h{i}/attn/c_attn/b"] = (3 * n_embd,)
        shapes[f"h{i}/attn/c_proj/w"] = (n_embd, n_embd)
        shapes[f"h{i}/attn/c_proj/b"] = (n_embd,)
        shapes[f"h{i}/ln_2/g"] = (n_embd,)
        shapes[f"h{i}/ln_2/b"] = (n_embd,)
        shapes[f"h{i}/mlp/c_fc/w"] = (n_embd, 4 * n_embd)
        shapes[f"h{i}/mlp/c_fc/b"] = (4 * n_embd,)
        shapes[f"h{i}/mlp/c_proj/w"] = (4 * n_embd, n_embd)
        shapes[f"h{i}/mlp/c_proj/b"] = (n_embd,)
    shapes["ln_f/g"] = (n_embd,)
    shapes["ln_f/b"] = (n_embd,)
    return shapes


def check_names_and_shapes(shapes, hparams, path):
    """Raise CheckpointError unless `shapes` ({name: shape}) has exactly GPT-2's parameters for `hparams`."""
    n_expected = 12 * hparams["n_layer"] + 4  # counted before the names are built: n_layer may be absurd
    if n_expected > len(shapes) + 1000:  # far more names than tensors: say so without building them all
        raise checkpoint_error(
            path, f"it holds {len(shapes)} tensors, but GPT-2 with n_layer={hparams['n_layer']} has {n_expected}"
        )
    expected = gpt2_param_shapes(hparams)
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected:
        raise checkpoint_error(
            path, f"not GPT-2 with {hparams}: missing variables {missing[:5]}, unexpected variables {unexpected[:5]}"
        )
    for name, shape in expected.items():
        if tuple(shapes[name]) != shape:
            raise checkpoint_error(
                path, f"{name} has shape {list(shapes[name])}, but the hyperparameters {hparams} make it {list(shape)}"
            )


def nest_params(arrays, n_layer):
    """{"h0/attn/c_attn/w": array, "wte": array, ...} -> picoGPT's nested params dict.

    "wte" -> params["wte"]; "ln_f/g" -> params["ln_f"]["g"]; "h3/attn/c_attn/w" ->
    params["blocks"][3]["attn"]["c_attn"]["w"].
    """
    params = {"blocks": [{} for _ in range(n_layer)]}
    for name, array in arrays.items():
        keys = name.split("/")
        tree = params
        if re.fullmatch(r"h\d+", keys[0]):
            tree, keys = params["blocks"][int(keys[0][1:])], keys[1:]
        for key in keys[:-1]:
            tree = tree.setdefault(key, {})
        tree[keys[-1]] = array
    return params


READ_CHUNK_BYTES = 2 << 20  # rows read per step of read_tensor: about 2 MB, so a chunk stays in the L2 cache


def read_tensor(file, offset, shape, stored_dtype, path, column_major=False, out=None):
    """The tensor of `shape` whose values (row-major, `stored_dtype`) start at byte `offset` of `file`, as
    float32 in its final layout: column-major if `column_major` (the blocks' weight matrices: see
    products.column_major), else row-major. out: the array to fill, of that shape and layout (a view into
    loaders/matrix_memory.py's one array), else a new one.

    The array is allocated once, in its final layout, and filled from the file: a float32 row-major tensor
    by one `readinto`, straight into it; anything else (a matrix made column-major, float16 or bfloat16
    widened) a few rows at a time, through a chunk of about READ_CHUNK_BYTES. So loading a model holds the
    weights plus one small chunk, never a second copy of a tensor. No memory map, whose touched pages would
    count as the process's memory too.

    Why chunks of rows: the file holds w [n_in, n_out] row by row, and column-major memory holds it column by
    column, so every value moves. Copying a whole 9 MB matrix at once (np.asfortranarray) scatters its writes
    over the whole destination, far more than the CPU's caches hold; a chunk of rows writes a short run into
    every column, and both the chunk and the runs it writes stay in cache. For 124M's shapes that made the
    reordering several times faster when it was written (tools/measure_loading.py times a whole load).
    """
    stored = np.dtype(stored_dtype)
    order = "F" if column_major else "C"
    array = np.empty(shape, dtype=np.float32, order=order) if out is None else out  # the final array
    file.seek(offset)
    if stored == np.float32 and not column_major:  # already in its final form: straight from the file
        return read_only(_read_exactly(file, array, offset, path))
    row_values = math.prod(shape[1:])  # values per row (1 for a vector, whose "rows" are its values)
    rows_per_chunk = max(1, READ_CHUNK_BYTES // (row_values * stored.itemsize))
    for first in range(0, shape[0], rows_per_chunk):
        rows = min(rows_per_chunk, shape[0] - first)
        chunk = _read_exactly(file, np.empty((rows, *shape[1:]), dtype=stored), offset, path)  # row-major, as stored
        if stored_dtype == "<u2":  # bfloat16: the top half of a float32
            chunk = (chunk.astype(np.uint32) << 16).view(np.float32)
        array[first : first + rows] = chunk  # widened to float32 and put in the array's layout
    return read_only(array)


def read_only(array):
    """array, made read-only: weights are constants (and products.matmul shares only read-only matrices with its
    helper process, whose copy of them must stay equal)."""
    array.flags.writeable = False
    return array


def _read_exactly(file, array, offset, path):
    """array, filled with the next array.nbytes bytes of file; CheckpointError if the file ends first."""
    if file.readinto(memoryview(array.reshape(-1, order="A")).cast("B")) != array.nbytes:
        raise checkpoint_error(path, f"it ends inside a tensor at byte {offset}")
    return array


def reading_bar(total_bytes, path):
    """A progress bar over the bytes of weights read from `path`; silent below 100 MB (tests, tiny models)."""
    return tqdm(desc=f"reading {Path(path).name}", total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024,
                disable=total_bytes < 100e6)


def is_block_matrix(name):
    """A block's weight matrix ("h3/attn/c_attn/w")."""
    return name.startswith("h") and name.endswith("/w")


def stored_by_column(name, layouts=None):
    """Whether the tensor `name` is read column by column (Fortran order) for layouts {"blocks": layout, "head":
    layout} (speed/layouts.py; None: its DEFAULT): a block's matrix w where blocks are by column, and wte where
    the head (wte.T) is by row. The rest (biases, gains, wpe) row by row."""
    blocks, head = (layouts or {}).get("blocks", "columns"), (layouts or {}).get("head", "columns")
    return (is_block_matrix(name) and blocks == "columns") or (name == "wte" and head == "rows")


def check_tensors_tile(spans, path):
    """CheckpointError unless the tensors' byte spans [(name, begin, end)] lie end to end from byte 0, with
    no overlap and no hole: two tensors sharing bytes would silently read each other's values."""
    position = 0
    for name, begin, end in sorted(spans, key=lambda span: (span[1], span[2])):
        if begin != position:
            problem = "overlaps the tensor before it" if begin < position else f"leaves a hole at byte {position}"
            raise checkpoint_error(path, f"{shown(name)} (bytes {begin} .. {end}) {problem}")
        position = end
