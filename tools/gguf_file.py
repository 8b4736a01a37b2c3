"""This project's GPT-2 weights as a GGUF file, llama.cpp's format (a tool for tools/compare_llama_cpp.py).

Read gpt2.py (the parameters) and encoder.py (the vocabulary, the merges) first. The `gguf` package (pure Python:
llama.cpp's own writer) writes it, float32 throughout, so llama.cpp computes with exactly this project's numbers.
A GGUF file holds key-value metadata, then the tensors (name, dimensions, type, offset) and their bytes. What
llama.cpp's architecture "gpt2" reads:

    general.architecture                  "gpt2"
    gpt2.context_length                   n_ctx (wpe's rows)
    gpt2.embedding_length                 n_embd
    gpt2.feed_forward_length              4 * n_embd (c_fc's width)
    gpt2.block_count                      n_layer
    gpt2.attention.head_count             n_head
    gpt2.attention.layer_norm_epsilon     1e-5 (gpt2.layer_norm's eps)
    general.file_type                     0: every tensor float32
    tokenizer.ggml.model                  "gpt2": byte-level BPE
    tokenizer.ggml.pre                    "gpt-2": GPT-2's pre-tokenizing regex (encoder.GPT2_PATTERN)
    tokenizer.ggml.tokens                 the symbols in id order, as encoder.json spells them ("Ġworld")
    tokenizer.ggml.token_type             1 (normal) for each, 3 (control) for a special token <|...|>
    tokenizer.ggml.merges                 "Ġ t", ...: vocab.bpe's merges, best first
    tokenizer.ggml.bos/eos_token_id       <|endoftext|>'s id, as in GPT-2's Hugging Face config

and the tensors, under llama.cpp's names (`gguf_tensors`):

    wte                     token_embd.weight      [n_vocab, n_embd]  also the LM head (no output.weight:
                                                                      llama.cpp then ties it, as GPT-2 does)
    wpe                     position_embd.weight   [n_ctx, n_embd]
    blocks[i].ln_1          blk.i.attn_norm        .weight (g) and .bias (b)
    blocks[i].attn.c_attn   blk.i.attn_qkv         .weight [3 n_embd, n_embd] and .bias [3 n_embd]
    blocks[i].attn.c_proj   blk.i.attn_output
    blocks[i].ln_2          blk.i.ffn_norm
    blocks[i].mlp.c_fc      blk.i.ffn_up
    blocks[i].mlp.c_proj    blk.i.ffn_down
    ln_f                    output_norm

A weight matrix w [n_in, n_out] (this project computes x @ w) is written transposed, as a row-major
[n_out, n_in] array: ggml names dimensions fastest-varying first, so llama.cpp reads it as {n_in, n_out}, the
shape its matrix product takes, each output the dot product of x with a contiguous row of w.T. That is how
llama.cpp's own converter writes GPT-2's Hugging Face checkpoint (Conv1D weights, [n_in, n_out] like OpenAI's),
and the loaders' default order (column-major): w.T is then a view (a copy where speed/layouts.py chose rows).
"""

import numpy as np

SPECIAL = ("<|", "|>")  # how GPT-2's vocabulary writes a special token: <|endoftext|>
NORMAL, CONTROL = 1, 3  # gguf.TokenType's values for an ordinary symbol and a special token
LAYER_NORM_EPS = 1e-5  # gpt2.layer_norm's eps


def gguf_tensors(params):
    """[(GGUF name, float32 array as written)] for picoGPT's nested params, in the order of the module docstring.

    Every array is float32 and row-major (C order), as GGUF stores it; a block matrix w [n_in, n_out] becomes
    w.T [n_out, n_in]. For params with n_layer blocks: 2 + 12 n_layer + 2 tensors (token and position
    embeddings; per block two norms, four matrices and their biases; the final norm).
    """

    def c_order(array):
        return np.ascontiguousarray(array, dtype=np.float32)  # a view when it is one already (w.T of column_major)

    tensors = [("token_embd.weight", c_order(params["wte"])), ("position_embd.weight", c_order(params["wpe"]))]
    for i, block in enumerate(params["blocks"]):
        parts = {"attn_norm": block["ln_1"], "attn_qkv": block["attn"]["c_attn"],
                 "attn_output": block["attn"]["c_proj"], "ffn_norm": block["ln_2"], "ffn_up": block["mlp"]["c_fc"],
                 "ffn_down": block["mlp"]["c_proj"]}
        for name, part in parts.items():
            weight, bias = (part["g"], part["b"]) if "g" in part else (part["w"].T, part["b"])  # w: [n_in, n_out]
            tensors += [(f"blk.{i}.{name}.weight", c_order(weight)), (f"blk.{i}.{name}.bias", c_order(bias))]
    tensors += [("output_norm.weight", c_order(params["ln_f"]["g"])), ("output_norm.bias", c_order(params["ln_f"]["b"]))]
    return tensors


def gguf_vocabulary(encoder):
    """(tokens, token types, merges) of an encoder.Encoder, as GGUF's tokenizer.ggml.* lists them.

    tokens[i] is id i's symbol; its type is CONTROL for a special token (<|endoftext|>), else NORMAL; the
    merges are "left right" strings, best (lowest rank) first. A vocabulary whose ids are not 0 .. n - 1 is a
    ValueError (encoder.check_vocabulary refuses such files already).
    """
    tokens = [encoder.decoder.get(i) for i in range(len(encoder.decoder))]
    if None in tokens:
        raise ValueError(f"the vocabulary's {len(tokens)} ids are not 0 .. {len(tokens) - 1}: id {tokens.index(None)} "
                         f"has no symbol")
    types = [CONTROL if token.startswith(SPECIAL[0]) and token.endswith(SPECIAL[1]) else NORMAL for token in tokens]
    merges = [f"{left} {right}" for left, right in sorted(encoder.bpe_ranks, key=encoder.bpe_ranks.get)]
    return tokens, types, merges


def write_gguf(path, params, hparams, encoder, name="gpt2"):
    """Write params (picoGPT's nested layout), hparams and encoder's vocabulary as a float32 GGUF file at path.

    The vocabulary must have one symbol per row of wte (n_vocab). Needs the `gguf` package.
    """
    tokens, types, merges = gguf_vocabulary(encoder)
    if len(tokens) != hparams["n_vocab"] or params["wte"].shape[0] != hparams["n_vocab"]:
        raise ValueError(f"the vocabulary has {len(tokens)} symbols, wte {params['wte'].shape[0]} rows and n_vocab "
                         f"is {hparams['n_vocab']}: they must be one model's")
    import gguf  # an optional extra (requirements/llama.txt): only this tool needs it

    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_name(name)
    writer.add_context_length(hparams["n_ctx"])
    writer.add_embedding_length(hparams["n_embd"])
    writer.add_feed_forward_length(4 * hparams["n_embd"])
    writer.add_block_count(hparams["n_layer"])
    writer.add_head_count(hparams["n_head"])
    writer.add_layer_norm_eps(LAYER_NORM_EPS)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if "<|endoftext|>" in encoder.encoder:
        writer.add_bos_token_id(encoder.encoder["<|endoftext|>"])
        writer.add_eos_token_id(encoder.encoder["<|endoftext|>"])
    for tensor_name, array in gguf_tensors(params):
        writer.add_tensor(tensor_name, array)  # kept by reference until written: no second copy of the weights
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_name(path):
    """The general.name a GGUF file holds (write_gguf's `name`), or None where it has none. Needs `gguf`."""
    import gguf

    field = gguf.GGUFReader(str(path)).fields.get("general.name")
    return None if field is None else field.contents()
