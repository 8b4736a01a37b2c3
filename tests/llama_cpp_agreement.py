"""llama.cpp computes what gpt2.py computes from the same weights: a check run by name, with the optional extras.

Read tools/gguf_file.py and tools/compare_llama_cpp.py first. The suite does not collect this file (its name
does not start with test_): llama-cpp-python is an optional extra, built from source, which CI does not
install. With it installed, run

    pip install -r requirements/llama.txt
    python -m pytest tests/llama_cpp_agreement.py

A tiny model (2 layers, 8 wide, GPT-2's vocabulary; weights of std 0.5, so no float32 near-tie decides a greedy
token) is written as a GGUF file and loaded by llama.cpp, one thread and two: the tokenizers give the same ids,
the logits of every position agree (to llama.cpp's float16 GELU), and greedy decoding writes the same tokens.
"""

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install -r requirements/llama.txt")

from encoder import get_encoder  # noqa: E402
from gpt2 import gpt2  # noqa: E402
from model_fn import create_model_fn  # noqa: E402
from sampling import autoregressive_sampling  # noqa: E402
from test_main import TINY_HPARAMS, tiny_params  # noqa: E402
from tools.compare_llama_cpp import PROMPT, llama_cpp_model, open_llama  # noqa: E402
from tools.gguf_file import write_gguf  # noqa: E402


@pytest.mark.parametrize("threads", [1, 2])
def test_llama_cpp_on_the_gguf_file_gives_the_same_ids_logits_and_greedy_tokens(tmp_path, release_124M_dir, threads):
    """The logits agree to 1e-3 of their spread, not to float32 rounding: llama.cpp's GELU rounds its input to
    float16 and reads its output from a float16 table (ggml's GGML_GELU_FP16), a relative error up to 2^-11 each
    way, carried through both blocks (what is left is float32 sums in another order). The greedy tokens must be
    equal, as many as fit after main.py's prompt."""
    params = tiny_params(seed=1)
    encoder = get_encoder("124M", str(release_124M_dir.parent))
    path = write_gguf(tmp_path / "tiny.gguf", params, TINY_HPARAMS, encoder)
    theirs = llama_cpp_model(open_llama(path, threads, TINY_HPARAMS["n_ctx"], flash_attn=False))
    ours = create_model_fn(params, TINY_HPARAMS, temperature=0)
    prompt = encoder.encode(PROMPT)
    assert theirs.tokenize(PROMPT) == prompt

    our_logits = gpt2(prompt, **params, n_head=TINY_HPARAMS["n_head"])  # [n_seq, n_vocab]
    their_logits = np.array(theirs.logits(prompt, len(prompt)))  # [n_seq, n_vocab]
    np.testing.assert_allclose(their_logits, our_logits, rtol=0, atol=1e-3 * float(np.ptp(our_logits)))

    rng = np.random.default_rng(0)
    n_new = TINY_HPARAMS["n_ctx"] - len(prompt) - 1
    assert autoregressive_sampling(prompt, theirs, n_new, rng) == autoregressive_sampling(prompt, ours, n_new, rng)


def test_the_comparison_runs_end_to_end_on_a_tiny_model_folder_one_process_per_thread_count(tmp_path, release_124M_dir,
                                                                                           capsys):
    """tools/compare_llama_cpp.py on a Hugging Face folder (the path of any folder the project loads): the GGUF file
    written and kept, a process for each of 1 and 2 threads, both agreeing; its --json holds what its tables read."""
    import json

    from test_main import write_hf_folder
    from tools import compare_llama_cpp

    folder = write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)
    out, gguf_file = tmp_path / "llama.json", tmp_path / "tiny.gguf"
    compare_llama_cpp.main(["--model", str(folder), "--n_context", "20", "--n_new", "4", "--n_check", "8", "--ms",
                            "2,4", "--repeats", "1", "--gguf", str(gguf_file), "--json", str(out)])
    data = json.loads(out.read_text())
    assert [result["threads"] for result in data["results"]] == [1, 2] and gguf_file.is_file()
    assert not compare_llama_cpp.disagrees(data["results"])
    assert sorted(data["results"][0]["passes"]["llama.cpp"], key=int) == ["1", "2", "4"]
    assert compare_llama_cpp.markdown_report(data) in capsys.readouterr().out
