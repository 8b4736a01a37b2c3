"""Peak memory and time of loading a GPT-2 checkpoint, against the bytes of its weights (issue: loading in
little more than the weights). Writes random weights of a released size as OpenAI's TF checkpoint and as a
Hugging Face folder, then loads each in a fresh process and reports its peak resident memory and its time,
next to the time of reading the file's bytes (`cat`) from the same warm page cache.

    python tests/measure_loading.py --size 1558M --folder /tmp/gpt2-load   # ~13 GB of disk, deleted after

Not a test (it takes minutes and gigabytes); the README quotes its output.
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpt2  # noqa: E402
from make_bad_inputs import field, table, varint  # noqa: E402
from test_load import hf_name, write_safetensors  # noqa: E402


def flat_params(params):
    """{"h0/attn/c_attn/w": array, "wte": array, ...} in OpenAI's names."""
    out = {"wte": params["wte"], "wpe": params["wpe"], "ln_f/g": params["ln_f"]["g"], "ln_f/b": params["ln_f"]["b"]}
    for i, block in enumerate(params["blocks"]):
        for module, leaves in block.items():
            for name, value in leaves.items():
                if isinstance(value, dict):
                    out.update({f"h{i}/{module}/{name}/{leaf}": v for leaf, v in value.items()})
                else:
                    out[f"h{i}/{module}/{name}"] = value
    return out


def write_tf_checkpoint(folder, arrays, hparams):
    """OpenAI's layout: hparams.json, checkpoint, model.ckpt.index (a LevelDB table) and the data file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hparams.json").write_text(json.dumps(hparams))
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt"\n')
    pairs, offset = [(b"", field(1, 0, varint(1)))], 0
    with open(folder / "model.ckpt.data-00000-of-00001", "wb") as data:
        for name in sorted(arrays):
            array = np.ascontiguousarray(arrays[name], dtype="<f4")
            shape = ([1] + list(array.shape)) if name.endswith("/w") else list(array.shape)
            dims = b"".join(field(2, 2, varint(len(d)) + d) for d in (field(1, 0, varint(s)) for s in shape))
            entry = field(1, 0, varint(1)) + field(2, 2, varint(len(dims)) + dims)
            entry += field(4, 0, varint(offset)) + field(5, 0, varint(array.nbytes))
            pairs.append((f"model/{name}".encode(), entry))
            data.write(array.tobytes())
            offset += array.nbytes
    (folder / "model.ckpt.index").write_bytes(table(pairs))
    return offset


def measure(code):
    """(peak RSS in bytes, seconds) of running `code` in a fresh Python. The peak is VmHWM from /proc: a
    child's getrusage maxrss would start from its parent's, since the high-water mark survives fork."""
    script = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
              f"import utils\nstart = time.perf_counter()\n{code}\n"
              f"seconds = time.perf_counter() - start\n"
              f"hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM')][0].split()[1]\n"
              f"print(seconds, hwm)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    return int(out[-1]) * 1024, float(out[-2])


def cat_seconds(path):
    start = time.perf_counter()
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="124M", choices=list(gpt2.HPARAMS))
    parser.add_argument("--folder", default="/tmp/gpt2-load")
    args = parser.parse_args()
    hparams = gpt2.HPARAMS[args.size]
    root = Path(args.folder)
    arrays = flat_params(gpt2.random_params(hparams, np.random.default_rng(0)))
    weights = write_tf_checkpoint(root / "tf", arrays, hparams)
    hf = root / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "gpt2", "vocab_size": hparams["n_vocab"], "n_positions": hparams["n_ctx"],
              "n_embd": hparams["n_embd"], "n_head": hparams["n_head"], "n_layer": hparams["n_layer"]}
    (hf / "config.json").write_text(json.dumps(config))
    write_safetensors(hf / "model.safetensors", {hf_name(n, "transformer."): a for n, a in arrays.items()}, "F32")
    del arrays
    base_rss, _ = measure("pass")
    print(f"{args.size}: weights {weights / 1e9:.2f} GB; an empty Python {base_rss / 1e6:.0f} MB")
    for name, code, data_file in [
        ("TF checkpoint", f"utils.load_gpt2_params_from_tf_ckpt({str(root / 'tf' / 'model.ckpt')!r}, "
                          f"utils.read_openai_hparams({str(root / 'tf' / 'hparams.json')!r}))",
         root / "tf" / "model.ckpt.data-00000-of-00001"),
        ("HF safetensors", f"utils.load_hf_gpt2({str(hf)!r})", hf / "model.safetensors"),
    ]:
        cat_seconds(data_file)  # warm the page cache
        cat = min(cat_seconds(data_file) for _ in range(2))
        rss, seconds = min(measure(code) for _ in range(2))
        print(f"  {name}: peak RSS {rss / 1e9:.2f} GB = {rss / weights:.2f}x the weights "
              f"({(rss - base_rss) / weights:.2f}x above an empty Python); {seconds:.1f} s = "
              f"{seconds / cat:.2f}x reading the file ({cat:.1f} s)")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
