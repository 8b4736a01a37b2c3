"""The peer encoder.py is checked against: OpenAI's tiktoken, built from the same encoder.json and vocab.bpe.

The ids must agree (tests/test_encoder.py); tools/small_parts.py times it and counts the code points where the
two differ. It lives with the tools because a tool may not import a test module, while a test may import a tool.
"""

import functools
import os


@functools.lru_cache(maxsize=None)
def tiktoken_gpt2(folder):
    """tiktoken's GPT-2 encoding, built from the encoder.json and vocab.bpe in `folder` (tiktoken must be installed:
    requirements/dev.txt). Cached: reading the 50,000 merges takes a while.

    Given local paths (no "://"), tiktoken's loader open()s them; TIKTOKEN_CACHE_DIR="" also stops it from keeping
    (and later trusting) a copy in /tmp. No network is involved.
    """
    import tiktoken
    import tiktoken.load

    try:  # tiktoken >= 0.7 names its GPT-2 pattern; older versions spell it inline, as OpenAI's encoder.py does
        from tiktoken_ext.openai_public import r50k_pat_str as pattern
    except ImportError:
        pattern = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        mergeable_ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=str(folder / "vocab.bpe"), encoder_json_file=str(folder / "encoder.json")
        )
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved
    return tiktoken.Encoding(name="gpt2_from_release_files", pat_str=pattern, mergeable_ranks=mergeable_ranks,
                             special_tokens={"<|endoftext|>": 50256})
