"""tools/gguf_file.py and tools/compare_llama_cpp.py, without llama.cpp: the GGUF file read back by the gguf
package's own reader, the llama.cpp model function on a stand-in for llama-cpp-python, the tables from made-up
timings, and the flags.

Read tools/gguf_file.py and tools/compare_llama_cpp.py first: these tests are their specification. The
greedy agreement with the real llama.cpp needs llama-cpp-python, an optional extra that the suite does not
install: tests/llama_cpp_agreement.py checks it on a tiny model, run by name (it says how).
"""

import json

import numpy as np
import pytest

from encoder import Encoder, bytes_to_unicode
from loaders.random_weights import random_params
from sampling import autoregressive_sampling
from tools import compare_llama_cpp
from tools.compare_llama_cpp import (
    DEFAULTS,
    INSTALL,
    OURS,
    THEIRS,
    agreement_text,
    breakdown_rows,
    check_flags,
    cores_text,
    disagrees,
    first_difference,
    goal_text,
    llama_cpp_model,
    markdown_report,
    speed_rows,
)
from tools.gguf_file import CONTROL, NORMAL, gguf_tensors, gguf_vocabulary, write_gguf

# 256 byte symbols, one merge ("Ġ" + "t") and <|endoftext|>: a byte-level BPE vocabulary of 258 ids
BYTES = list(bytes_to_unicode().values())
SMALL_VOCAB = {**{symbol: i for i, symbol in enumerate(BYTES)}, "Ġt": 256, "<|endoftext|>": 257}
SMALL_MERGES = [("Ġ", "t")]
SMALL = {"n_vocab": 258, "n_ctx": 16, "n_embd": 8, "n_head": 2, "n_layer": 2}


def small_model(seed=0):
    return Encoder(SMALL_VOCAB, SMALL_MERGES), random_params(SMALL, np.random.default_rng(seed))


# ------------------------------------------------------------------------------------------------------------
# The GGUF file
# ------------------------------------------------------------------------------------------------------------


def test_the_tensors_carry_llama_cpps_names_with_each_matrix_transposed_and_nothing_copied_twice():
    """2 embeddings + 2 blocks x 12 (two norms and four products, each a weight and a bias) + the final norm's 2 =
    28 tensors. A block matrix w [n_in, n_out] is written as w.T [n_out, n_in]; the column-major w of the loaders
    makes that a view of the same memory, not a copy."""
    _, params = small_model()
    tensors = dict(gguf_tensors(params))
    assert len(tensors) == 2 + 2 * 12 + 2
    assert list(tensors)[:4] == ["token_embd.weight", "position_embd.weight", "blk.0.attn_norm.weight",
                                 "blk.0.attn_norm.bias"]
    block = params["blocks"][1]
    for name, part in (("attn_qkv", block["attn"]["c_attn"]), ("attn_output", block["attn"]["c_proj"]),
                       ("ffn_up", block["mlp"]["c_fc"]), ("ffn_down", block["mlp"]["c_proj"])):
        weight = tensors[f"blk.1.{name}.weight"]
        assert weight.shape == part["w"].shape[::-1] and (weight == part["w"].T).all(), name
        assert np.shares_memory(weight, part["w"]) and weight.flags.c_contiguous, name
        assert (tensors[f"blk.1.{name}.bias"] == part["b"]).all(), name
    assert (tensors["blk.1.ffn_norm.weight"] == block["ln_2"]["g"]).all()
    assert (tensors["output_norm.bias"] == params["ln_f"]["b"]).all()
    assert all(array.dtype == np.float32 for array in tensors.values())


def test_the_vocabulary_is_listed_in_id_order_with_the_special_token_as_control_and_the_merges_best_first():
    tokens, types, merges = gguf_vocabulary(Encoder(SMALL_VOCAB, SMALL_MERGES))
    assert tokens[:3] == ["!", '"', "#"] and tokens[256:] == ["Ġt", "<|endoftext|>"]
    assert types == [NORMAL] * 257 + [CONTROL]
    assert merges == ["Ġ t"]
    with pytest.raises(ValueError, match="id 1 has no symbol"):
        gguf_vocabulary(Encoder({"a": 0, "b": 2}, []))


def test_a_vocabulary_that_is_not_the_models_is_refused_before_anything_is_written(tmp_path):
    encoder, params = small_model()
    with pytest.raises(ValueError, match="the vocabulary has 258 symbols, wte 258 rows and n_vocab is 300"):
        write_gguf(tmp_path / "x.gguf", params, {**SMALL, "n_vocab": 300}, encoder)
    assert not (tmp_path / "x.gguf").exists()


def test_the_gguf_file_reads_back_with_the_gguf_packages_reader_tensor_by_tensor_and_key_by_key(tmp_path):
    """What llama.cpp reads: the architecture's hyperparameters, the tokenizer, and every tensor with its
    values, in ggml's order of dimensions (fastest first: blk.i.attn_qkv.weight is {n_embd, 3 n_embd})."""
    gguf = pytest.importorskip("gguf", reason="needs the gguf package: pip install -r requirements/dev.txt")
    encoder, params = small_model()
    path = write_gguf(tmp_path / "small.gguf", params, SMALL, encoder, name="small")
    reader = gguf.GGUFReader(path)

    def value(key):
        return reader.fields[key].contents()

    assert value("general.architecture") == "gpt2" and value("general.name") == "small"
    assert [value(f"gpt2.{key}") for key in ("context_length", "embedding_length", "feed_forward_length",
                                             "block_count", "attention.head_count")] == [16, 8, 32, 2, 2]
    assert value("gpt2.attention.layer_norm_epsilon") == pytest.approx(1e-5)
    assert value("general.file_type") == gguf.LlamaFileType.ALL_F32
    assert value("tokenizer.ggml.model") == "gpt2" and value("tokenizer.ggml.pre") == "gpt-2"
    assert value("tokenizer.ggml.tokens") == gguf_vocabulary(encoder)[0]
    assert value("tokenizer.ggml.token_type")[-2:] == [NORMAL, CONTROL]
    assert value("tokenizer.ggml.merges") == ["Ġ t"]
    assert value("tokenizer.ggml.bos_token_id") == value("tokenizer.ggml.eos_token_id") == 257

    written = dict(gguf_tensors(params))
    assert [tensor.name for tensor in reader.tensors] == list(written)
    for tensor in reader.tensors:
        assert tensor.tensor_type == gguf.GGMLQuantizationType.F32, tensor.name
        assert list(tensor.shape) == list(written[tensor.name].shape[::-1]), tensor.name
        assert np.array_equal(tensor.data, written[tensor.name]), tensor.name
    qkv = next(tensor for tensor in reader.tensors if tensor.name == "blk.0.attn_qkv.weight")
    assert list(qkv.shape) == [8, 24]  # {n_in, n_out}: the shape llama.cpp's gpt2 loader asks for


# ------------------------------------------------------------------------------------------------------------
# llama.cpp as a model function, on a stand-in for llama-cpp-python's Llama
# ------------------------------------------------------------------------------------------------------------


class FakeLlama:
    """What llama_cpp_model uses of llama-cpp-python's Llama: n_tokens, eval (which first drops the cached
    positions from n_tokens on), scores (each position's logits), n_vocab(), n_ctx(), tokenize. Its "model":
    the logits after a sequence peak at (7 * the sum of its tokens + 3) mod n_vocab. It records every eval."""

    def __init__(self, n_vocab=11, n_ctx=32):
        self.vocab, self.context = n_vocab, n_ctx
        self.n_tokens, self.tokens, self.evals = 0, [], []
        self.scores = np.zeros((n_ctx, n_vocab), dtype=np.float32)

    def eval(self, tokens):
        self.evals.append((self.n_tokens, list(tokens)))
        self.tokens = self.tokens[: self.n_tokens] + list(tokens)
        for position in range(self.n_tokens, len(self.tokens)):
            self.scores[position] = -1.0
            self.scores[position, next_token(self.tokens[: position + 1], self.vocab)] = 1.0
        self.n_tokens = len(self.tokens)

    def n_vocab(self):
        return self.vocab

    def n_ctx(self):
        return self.context

    def tokenize(self, text, add_bos, special):
        return list(text)


def next_token(tokens, n_vocab):
    return (7 * sum(tokens) + 3) % n_vocab


def test_llamas_model_function_feeds_only_what_its_cache_lacks_and_at_least_the_rows_asked_for():
    """As create_model_fn does: the longest prefix shared with the previous call stays cached (n_tokens is set to
    it), and the last n tokens are always fed; the rows are one-hot at the argmax (temperature 0)."""
    llm = FakeLlama()
    model = llama_cpp_model(llm)
    probs = model([1, 2, 3], 1)
    assert probs.shape == (1, 11) and probs.dtype == np.float64
    assert probs[0].argmax() == next_token([1, 2, 3], 11) and probs.sum() == 1
    model([1, 2, 3, 4], 1)
    rows = model([1, 2, 3, 9, 9], 2)  # a rollback past 4, then two rows
    model([1, 2, 3, 9, 9], 1)  # the same tokens again: the last one is fed, for its row
    assert llm.evals == [(0, [1, 2, 3]), (3, [4]), (3, [9, 9]), (4, [9])]
    assert [row.argmax() for row in rows] == [next_token([1, 2, 3, 9], 11), next_token([1, 2, 3, 9, 9], 11)]
    assert model.n_vocab == 11 and model.n_ctx == 32 and model.tokenize("ab") == [b"a"[0], b"b"[0]]
    with pytest.raises(ValueError, match="chains only"):
        model([1, 2], 1, parents=[-1, 0])


def test_greedy_decoding_through_the_sampler_makes_one_single_position_pass_per_token():
    llm = FakeLlama()
    model = llama_cpp_model(llm)
    ids = autoregressive_sampling([5, 6], model, 4, np.random.default_rng(0))
    expected = [5, 6]
    for _ in range(4):
        expected.append(next_token(expected, 11))
    assert ids == expected
    assert [len(fed) for _, fed in llm.evals] == [2, 1, 1, 1]


def test_first_difference_is_where_two_token_lists_part():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


# ------------------------------------------------------------------------------------------------------------
# The report, from made-up timings
# ------------------------------------------------------------------------------------------------------------

AGREE = {"prompt_tokens": 11, "n_check": 32, "n_new": 16, "tokenizer_difference": None, "check_difference": None,
         "decode_difference": None, "max_logit_difference": 2.5e-6, "logit_std": 0.55}
BREAKDOWN = {"sampler step": 0.0350, "model step": 0.0340, "model step, its parts timed": 0.0340,
             "block products, in the step": 0.0250,
             "LM head, in the step": 0.0050, "attention, in the step": 0.0030, "block products": 0.0240,
             "LM head": 0.0048, "attention": 0.0029, "logits_to_probs": 0.0001, "_check_probs + _sample": 0.0002,
             "sampled": 0.001, "model step, replayed": 0.0006}  # (the parts alone a little faster than in the step)
# two threads: the products shrink, attention hardly, the rest not
BREAKDOWN_2 = {**BREAKDOWN, "sampler step": 0.0230, "model step": 0.0220, "model step, its parts timed": 0.0220,
               "block products, in the step": 0.0150, "LM head, in the step": 0.0030, "attention, in the step": 0.0029,
               "block products": 0.0145, "LM head": 0.0029, "attention": 0.0028}


def fake_data():
    """One thread: this project decodes at 36 ms/token against llama.cpp's 30 (1.20x), passes of 30, 60, 75 ms
    (r = 1, 2.00, 2.50) against 24, 30, 36 ms (r = 1, 1.25, 1.50). Two threads: 20 against 25 ms/token (0.80x)."""
    def result(threads, ours, theirs, ours_passes, their_passes):
        return {"threads": threads, "blas_threads": threads, "agreement": dict(AGREE),
                "breakdown": dict(BREAKDOWN if threads == 1 else BREAKDOWN_2),
                "decode": {OURS: ours, THEIRS: theirs}, "passes": {OURS: ours_passes, THEIRS: their_passes}}

    run = {"command": "python tools/compare_llama_cpp.py", "weights": "random weights of 124M's shapes (seed 0)",
           "llama_cpp": "0.3.36", "machine": "a machine", "blas": "an unknown BLAS", "minutes": 2.0,
           "load_average": [1.0, 2.0], "cores": 2, "prompt": "Alan Turing", "n_check": 32, "n_context": 512, "n_new": 16,
           "ms": [1, 2, 4], "repeats": 2, "flash_attn": False, "threads": [1, 2]}
    results = [result(1, [0.040, 0.036], [0.030, 0.031], {1: [0.030, 0.032], 2: [0.060, 0.066], 4: [0.075, 0.08]},
                      {1: [0.025, 0.024], 2: [0.030, 0.031], 4: [0.036, 0.04]}),
               result(2, [0.020, 0.021], [0.025, 0.026], {1: [0.02, 0.02], 2: [0.02, 0.02], 4: [0.02, 0.02]},
                      {1: [0.02, 0.02], 2: [0.02, 0.02], 4: [0.02, 0.02]})]
    return json.loads(json.dumps({"run": run, "results": results}))  # as --json writes it: the m are strings


def test_the_speed_table_puts_each_implementations_minimums_and_r_beside_their_quotient():
    header, *rows = speed_rows(fake_data()["results"])
    assert header == ["threads", "implementation", "decode, ms/token", "1-position pass, ms", "r(2)", "r(4)"]
    assert rows[:3] == [["1 thread", OURS, "36.0", "30.0", "2.00", "2.50"],
                        ["1 thread", THEIRS, "30.0", "24.0", "1.25", "1.50"],
                        ["1 thread", f"{OURS} / {THEIRS}", "1.20×", "1.25×", "1.60×", "1.67×"]]
    assert rows[5][2] == "0.80×"


def test_the_goal_is_met_where_this_projects_step_is_within_5_percent_of_llamas_and_missed_elsewhere():
    assert goal_text(fake_data()["results"]).endswith("1.20× with 1 thread, 0.80× with 2 threads. The goal, at most "
                                                      "1.05×, is met with 2 threads, not with 1 thread.")


def test_the_breakdown_lists_this_projects_parts_then_llamas_whole_step():
    header, *rows = breakdown_rows(fake_data()["results"], repeats=2)
    assert header == ["ms (best of 2)", "1 thread", "2 threads"]
    assert rows[:2] == [[f"{OURS}: block matrix products", "25.00", "15.00"],  # in the step
                        [f"{OURS}: block matrix products, alone", "24.00", "14.50"]]
    assert [f"{OURS}: attention over the cache", "3.00", "2.90"] in rows
    assert [f"{OURS}: rest of the forward pass", "0.90", "1.00"] in rows  # 34 - 25 - 5 - 3 - 0.1; 22 - 15 - 3 - 2.9 - 0.1
    assert [f"{OURS}: the same rest, alone", "0.50", "0.50"] in rows  # the replayed step 0.6 - logits_to_probs 0.1
    assert rows[-1] == [f"{THEIRS}: step through the same sampler (decode, ms/token)", "30.00", "25.00"]


def test_the_cores_sentence_gives_each_part_with_one_thread_and_two_and_names_the_part_the_second_core_helps_least():
    """Block products 25 -> 15 ms (0.60), LM head 5 -> 3 (0.60), attention 3 -> 2.9 (0.97), the rest 0.9 -> 1.0 (1.11):
    the rest is the part with the highest quotient. With one thread count only there is nothing to compare."""
    results = fake_data()["results"]
    assert cores_text(results) == (
        "What the second core takes off each part of the step, ms with 1 thread → with 2 (their quotient): block "
        "matrix products 25.00 → 15.00 (0.60), LM head (x @ wte.T) 5.00 → 3.00 (0.60), attention over the cache "
        "3.00 → 2.90 (0.97), rest of the forward pass 0.90 → 1.00 (1.11). It takes least off the rest of the forward "
        "pass.")
    assert cores_text(results[:1]) == "" and "What the second core" in markdown_report(fake_data())


def test_the_agreement_sentence_says_what_agreed_or_where_it_parted():
    data = fake_data()
    text = agreement_text(data["run"], data["results"])
    assert "the same 11 token ids from both tokenizers, the same 32 greedy tokens" in text
    assert "the same 16 after the 512-token context" in text and not disagrees(data["results"])
    data["results"][1]["agreement"]["check_difference"] = 5
    text = agreement_text(data["run"], data["results"])
    assert "32 greedy tokens after the prompt differ from position 5 on (2 threads)" in text and "the same" not in text
    assert disagrees(data["results"])


def test_the_report_holds_the_run_both_tables_and_both_sentences():
    report = markdown_report(fake_data())
    for part in ("`python tools/compare_llama_cpp.py`", "| 1 thread | this project / llama.cpp | 1.20× |",
                 "| ms (best of 2) | 1 thread | 2 threads |", "The goal, at most 1.05×", "Greedy agreement"):
        assert part in report, part


def test_the_run_says_so_when_other_jobs_shared_the_cores():
    """A load average of 2 on 2 cores is this run's own two threads; 3.5 means more than one other job was running."""
    data = fake_data()
    assert "The machine was busy" not in markdown_report(data)
    data["run"]["load_average"] = [1.0, 3.5]
    assert "The machine was busy (a load average above its 2 cores)" in " ".join(markdown_report(data).split())


# ------------------------------------------------------------------------------------------------------------
# The flags
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, value, message", [
    ("threads", "0", "--threads must be a whole number >= 1; got 0"),
    ("threads", "1,two", "--threads must be a whole number >= 1; got 'two'"),
    ("threads", ",", "--threads needs at least one whole number"),
    ("ms", "-4", "--ms must be a whole number >= 1"),
    ("repeats", "0", "--repeats must be a whole number >= 1"),
    ("seed", "x", "--seed must be a whole number >= 0"),
    ("flash_attn", "maybe", "--flash_attn must be true or false"),
    ("model", "2M", "--model must be one of 124M, 355M, 774M, 1558M"),
    ("n_context", "1010", "--n_context 1010 \\+ max\\(--n_new, --ms\\) = 1026 positions do not fit in the model's "
                          "n_ctx = 1024"),
    ("prompt", "", "--prompt must be 1 to --n_context = 512 tokens"),
    ("json", "/no/such/folder/x.json", "--json /no/such/folder/x.json cannot be written"),
    ("reuse_gguf", "true", "--reuse_gguf reads the GGUF file --gguf names"),
])
def test_each_bad_flag_is_one_valueerror_naming_it(flag, value, message, release_124M_dir):
    with pytest.raises(ValueError, match=message):
        check_flags({**DEFAULTS, flag: value})


def test_a_reused_gguf_file_written_for_another_seed_is_refused_naming_both(tmp_path, release_124M_dir):
    """--reuse_gguf skips writing the weights; the file names the weights it holds (general.name), so a file
    written with --seed 1 is refused for a run of --seed 0, whose own weights would differ from llama.cpp's
    (every token would then disagree), and accepted for --seed 1."""
    gguf = pytest.importorskip("gguf", reason="needs the gguf package: pip install -r requirements/dev.txt")
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_name(compare_llama_cpp.weights_name({"model": "124M", "seed": 1}))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    reused = {**DEFAULTS, "gguf": str(path), "reuse_gguf": "true"}
    with pytest.raises(ValueError, match="holds '124M, random, seed 1', and --model and --seed make '124M, random, "
                                         "seed 0': give the ones it was written with, or leave out --reuse_gguf"):
        check_flags(reused)
    assert check_flags({**reused, "seed": "1"})["seed"] == 1


def test_random_weights_without_openais_tokenizer_files_say_where_they_were_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT2_MODELS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="tokenizer files .* are not in .*124M: copy encoder.json and vocab.bpe"):
        check_flags(DEFAULTS)


def test_the_defaults_pass_and_m_1_is_always_measured(release_124M_dir):
    settings = check_flags({**DEFAULTS, "ms": "4,2"})
    assert settings["ms"] == [1, 2, 4] and settings["threads"] == [1, 2] and settings["flash_attn"] is False


def test_a_bad_flag_or_a_missing_extra_is_one_line_and_exit_status_2(monkeypatch, capsys, release_124M_dir):
    with pytest.raises(SystemExit) as stopped:
        compare_llama_cpp.main(["--threads", "0"])
    assert stopped.value.code == 2 and capsys.readouterr().err == "error: --threads must be a whole number >= 1; got 0\n"
    monkeypatch.setattr(compare_llama_cpp, "missing_extras", lambda: ["llama_cpp"])
    with pytest.raises(SystemExit) as stopped:
        compare_llama_cpp.main([])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and INSTALL in err and "llama_cpp" in err
