"""Specification of encoder.py, GPT-2's byte-level BPE tokenizer.

The reference is tiktoken's GPT-2 encoding, built (tools/peers.py) from THE SAME two release files (encoder.json,
vocab.bpe) that our encoder reads, so both see one vocabulary. Small hand-made vocabularies (written to tmp_path)
pin down the merge rules and the error messages without OpenAI's files.
"""

import functools
import json

import numpy as np
import pytest

from encoder import GPT2_PATTERN, Encoder, bytes_to_unicode, get_encoder
from tools.peers import tiktoken_gpt2

PYTHON_SNIPPET = '''def greet(name: str) -> str:
    """Say hello."""
    if not name:
        raise ValueError("name is empty")
    return f"Hello, {name}!"  # 2 spaces before the comment


for i in range(3):
\tprint(greet("world"), i ** 2)
'''

LONG_PARAGRAPH = (
    "In 2019, OpenAI released GPT-2 (124M, 355M, 774M & 1558M parameters); it wasn't trained on code, yet it "
    "can write `print('hi')`.\nLes modèles de langue prédisent le mot suivant — 次の単語を予測する — "
    "и делают это снова и снова… 🤖✨ Prices: $3.50/kg, 20% off!!!  Email me@example.com   or call +1-555-0100.\r\n"
)

CORPUS = {
    "empty": "",
    "spaces": "     ",
    "space_newline_runs": "   \n\n  ",
    "leading_and_trailing_spaces": "   start and end   ",
    "tabs": "a\tb\t\tc\t",
    "crlf": "line one\r\nline two\r\n",
    "contractions_lower": "I'm sure they'll say we've done it, don't you think? it's what he'd do",
    "contractions_upper": "I'M SURE THEY'LL SAY WE'VE DONE IT, DON'T YOU? IT'S THE DO'S AND DON'TS",
    "contractions_mixed": "I'm I'M they'll THEY'LL we've WE'VE don't DON'T",
    "pi": "3.14159",
    "thousands": "1,000,000",
    "year": "2026",
    "long_number": "12345678901234567890",
    "accented_latin": "naïve café crème brûlée",
    "combining_accents": "cafe\u0301 nai\u0308ve",
    "chinese": "你好，世界",
    "japanese": "こんにちは、世界。カタカナとひらがなと漢字",
    "cyrillic": "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "greek": "Καλημέρα κόσμε, ξεσκεπάζω την ψυχοφθόρα βδελυγμία",
    "emoji_family_zwj": "👩‍👩‍👧‍👦",
    "emoji_rainbow_flag": "🏳️‍🌈",
    "emoji_in_text": "I ❤️ NumPy 👍🏽 so much 🎉🎉",
    "endoftext_as_text": "<|endoftext|>",
    "endoftext_in_text": "The end.<|endoftext|>The beginning.",
    "python_snippet": PYTHON_SNIPPET,
    "long_mixed_paragraph": LONG_PARAGRAPH,
}


@functools.lru_cache(maxsize=None)
def our_encoder(folder):
    """Our Encoder of `folder`, read once per test session, called the way main.py calls it."""
    return get_encoder(folder.name, folder.parent)


def write_tiny_vocabulary(folder, merges, vocab_name="encoder.json", merges_name="vocab.bpe"):
    """Write a minimal vocabulary to `folder`: the 256 byte characters (ids 0..255, in bytes_to_unicode order),
    then each merge's result (ids 256, 257, ...), and the merges file with its #version line."""
    symbols = list(bytes_to_unicode().values()) + [left + right for left, right in merges]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / vocab_name).write_text(json.dumps({s: i for i, s in enumerate(symbols)}), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{left} {right}" for left, right in merges]
    (folder / merges_name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {s: i for i, s in enumerate(symbols)}


# --- Identical to tiktoken on OpenAI's real files -------------------------------------------------------------


@pytest.mark.step5
@pytest.mark.parametrize("text", CORPUS.values(), ids=CORPUS.keys())
def test_encoding_equals_tiktoken_gpt2_built_from_the_same_files(release_124M_dir, text):
    """disallowed_special=() makes tiktoken treat "<|endoftext|>" as ordinary text, as our encode always does."""
    expected = tiktoken_gpt2(release_124M_dir).encode(text, disallowed_special=())
    assert our_encoder(release_124M_dir).encode(text) == expected


@pytest.mark.step5
@pytest.mark.parametrize("text", CORPUS.values(), ids=CORPUS.keys())
def test_decoding_the_encoding_gives_back_the_text(release_124M_dir, text):
    encoder = our_encoder(release_124M_dir)
    assert encoder.decode(encoder.encode(text)) == text


@pytest.mark.step5
def test_hand_checked_ids(release_124M_dir):
    """Ids read off encoder.json by hand: "Hello" 15496, "Ġworld" 995, "!" 0, "Ġ" (a space) 220, "<" 27, "|" 91."""
    encoder = our_encoder(release_124M_dir)
    assert encoder.encode("Hello world") == [15496, 995]
    assert encoder.encode("Hello world!") == [15496, 995, 0]
    assert encoder.encode(" ") == [220]
    assert encoder.encode("") == []
    assert encoder.encode("<|endoftext|>")[:2] == [27, 91]  # plain text: "<", "|", ...
    assert 50256 not in encoder.encode("<|endoftext|>")
    assert encoder.decode([50256]) == "<|endoftext|>"  # the id itself still decodes to its text


@pytest.mark.step5
def test_the_module_docstring_worked_example_holds(release_124M_dir):
    """encoder.py's docstring walks "Hello world!" through pre-tokens, characters, merges (with ranks) and ids."""
    encoder = our_encoder(release_124M_dir)
    pre_tokens = encoder.pattern.findall("Hello world!")
    assert pre_tokens == ["Hello", " world", "!"]
    chars = ["".join(encoder.byte_encoder[b] for b in p.encode("utf-8")) for p in pre_tokens]
    assert chars == ["Hello", "Ġworld", "!"]
    hello_merges = {("l", "l"): 41, ("e", "ll"): 439, ("ell", "o"): 10853, ("H", "ello"): 15240}
    world_merges = {("Ġ", "w"): 10, ("o", "r"): 17, ("l", "d"): 79, ("Ġw", "or"): 220, ("Ġwor", "ld"): 739}
    for pair, rank in {**hello_merges, **world_merges}.items():
        assert encoder.bpe_ranks[pair] == rank
    assert [encoder.bpe(c) for c in chars] == [("Hello",), ("Ġworld",), ("!",)]
    assert encoder.encode("Hello world!") == [15496, 995, 0]


@pytest.mark.step5
def test_contractions_are_split_off_only_in_lower_case(release_124M_dir):
    """OpenAI's pattern lists 's 't 're 've 'm 'll 'd in lower case only: "I'm" keeps "'m" together, "I'M" does
    not. It shows in the ids of "DON'TS": "DON", "'", "TS" (41173, 6, 4694), not "DON", "'T", "S"."""
    encoder = our_encoder(release_124M_dir)
    assert encoder.pattern.findall("I'm I'M") == ["I", "'m", " I", "'", "M"]
    assert encoder.encode("DON'TS") == [41173, 6, 4694]


@pytest.mark.step5
def test_decoding_half_a_character_gives_the_replacement_character(release_124M_dir):
    """"👍" is 4 UTF-8 bytes split over several tokens; its first token alone is not valid UTF-8."""
    encoder = our_encoder(release_124M_dir)
    ids = encoder.encode("👍")
    assert len(ids) > 1
    assert "\ufffd" in encoder.decode(ids[:1])


@pytest.mark.step5
def test_a_hugging_face_folder_with_vocab_json_and_merges_txt_encodes_the_same(release_124M_dir, tmp_path):
    """Hugging Face's gpt2 tokenizer files are OpenAI's under other names; merges.txt may lack the final newline."""
    hf_folder = tmp_path / "gpt2-hf"
    hf_folder.mkdir()
    (hf_folder / "vocab.json").write_bytes((release_124M_dir / "encoder.json").read_bytes())
    merges_text = (release_124M_dir / "vocab.bpe").read_text(encoding="utf-8")
    (hf_folder / "merges.txt").write_text(merges_text.rstrip("\n"), encoding="utf-8")
    hf_encoder = get_encoder("gpt2-hf", tmp_path)
    for text in [CORPUS["long_mixed_paragraph"], CORPUS["python_snippet"], CORPUS["emoji_family_zwj"]]:
        assert hf_encoder.encode(text) == our_encoder(release_124M_dir).encode(text)


# --- The algorithm, on tiny vocabularies ----------------------------------------------------------------------


def test_bytes_to_unicode_is_a_one_to_one_table_of_visible_characters():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(c.isprintable() and not c.isspace() for c in table.values())
    assert all(table[b] == chr(b) for b in range(ord("!"), ord("~") + 1))  # visible ASCII stands for itself
    assert (table[ord(" ")], table[ord("\n")]) == ("Ġ", "Ċ")


@pytest.mark.step5
def test_the_lowest_ranked_pair_is_merged_first(tmp_path):
    """With merges [b c, a b]: "abc" -> a (bc); (a, bc) is not a merge, so "ab" never forms."""
    vocab = write_tiny_vocabulary(tmp_path / "tiny", [("b", "c"), ("a", "b")])
    encoder = get_encoder("tiny", tmp_path)
    assert encoder.bpe("abc") == ("a", "bc")
    assert encoder.encode("abc") == [vocab["a"], vocab["bc"]]


@pytest.mark.step5
def test_every_occurrence_of_the_best_pair_is_merged_and_merges_build_on_merges(tmp_path):
    """With merges [a b, ab c]: "abcab" -> ab c ab -> abc ab."""
    vocab = write_tiny_vocabulary(tmp_path / "tiny", [("a", "b"), ("ab", "c")])
    encoder = get_encoder("tiny", tmp_path)
    assert encoder.encode("abcab") == [vocab["abc"], vocab["ab"]]
    assert encoder.decode(encoder.encode("abcab")) == "abcab"


@pytest.mark.step5
def test_merges_never_cross_pre_token_boundaries(tmp_path):
    """"a b" is the pre-tokens "a", " b"; the merge (a, Ġ) would join across them, so it never applies."""
    vocab = write_tiny_vocabulary(tmp_path / "tiny", [("a", "Ġ")])
    encoder = get_encoder("tiny", tmp_path)
    assert encoder.encode("a b") == [vocab["a"], vocab["Ġ"], vocab["b"]]


@pytest.mark.step5
def test_each_distinct_pre_token_is_merged_once_and_cached(tmp_path):
    """"ab ab ab ab cd" has 5 pre-tokens but only 3 distinct ones ("ab", " ab", " cd"), stored as characters."""
    write_tiny_vocabulary(tmp_path / "tiny", [("a", "b"), ("Ġ", "ab")])
    encoder = get_encoder("tiny", tmp_path)
    encoder.encode("ab ab ab ab cd")
    assert set(encoder.cache) == {"ab", "Ġab", "Ġcd"}
    assert encoder.cache["Ġab"] == ("Ġab",)


# --- Bad vocabulary files: a ValueError that names the file ---------------------------------------------------


def test_a_folder_without_vocabulary_names_both_file_conventions(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"encoder\.json.*vocab\.json"):
        get_encoder("empty", tmp_path)


def test_a_missing_vocab_bpe_is_named(tmp_path):
    write_tiny_vocabulary(tmp_path / "m", [("a", "b")])
    (tmp_path / "m" / "vocab.bpe").unlink()
    with pytest.raises(ValueError, match="vocab.bpe"):
        get_encoder("m", tmp_path)


def test_a_missing_merges_txt_next_to_vocab_json_is_named(tmp_path):
    write_tiny_vocabulary(tmp_path / "hf", [("a", "b")], vocab_name="vocab.json", merges_name="merges.txt")
    (tmp_path / "hf" / "merges.txt").unlink()
    with pytest.raises(ValueError, match="merges.txt"):
        get_encoder("hf", tmp_path)


@pytest.mark.parametrize("content", ['{"a": 0,', "[1, 2, 3]", '{"a": "zero"}'], ids=["cut_json", "list", "str_id"])
def test_an_invalid_encoder_json_is_named(tmp_path, content):
    write_tiny_vocabulary(tmp_path / "bad", [("a", "b")])
    (tmp_path / "bad" / "encoder.json").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="encoder.json"):
        get_encoder("bad", tmp_path)


@pytest.mark.parametrize("bad_line", ["a b c", "ab"], ids=["three_symbols", "one_symbol"])
def test_a_vocab_bpe_line_that_is_not_two_symbols_is_named_with_its_line_number(tmp_path, bad_line):
    write_tiny_vocabulary(tmp_path / "bad", [("a", "b")])
    (tmp_path / "bad" / "vocab.bpe").write_text(f"#version: 0.2\na b\n{bad_line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3 of .*vocab\.bpe"):
        get_encoder("bad", tmp_path)


def test_merges_that_make_symbols_missing_from_the_vocabulary_name_both_files(tmp_path):
    """Files from different models: vocab.bpe merges "x y", but encoder.json has no "xy"."""
    write_tiny_vocabulary(tmp_path / "mixed", [("a", "b")])
    (tmp_path / "mixed" / "vocab.bpe").write_text("#version: 0.2\na b\nx y\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"encoder\.json.*'xy'.*vocab\.bpe|encoder\.json.*vocab\.bpe.*'xy'"):
        get_encoder("mixed", tmp_path)


def test_decoding_an_unknown_id_is_a_value_error(tmp_path):
    write_tiny_vocabulary(tmp_path / "tiny", [("a", "b")])
    encoder = get_encoder("tiny", tmp_path)  # ids 0..256
    with pytest.raises(ValueError, match="257"):
        encoder.decode([0, 257])


# --- long words: the heap merge loop is O(n log n) and merges exactly what the rescan merges --------------------


@pytest.mark.parametrize("word", ["a" * 30_000, "ab" * 15_000, "Ġ" + "xyzzy" * 4_000, "long_seeded_letters"])
def test_a_very_long_word_encodes_to_the_same_ids_as_the_peer(release_124M_dir, word):
    """One pre-token tens of thousands of letters long (the old loop rescanned it after every merge: O(n^2),
    minutes at 100,000 letters). Overlapping runs ("a a a") test the left-to-right rule within one rank."""
    if word == "long_seeded_letters":
        rng = np.random.default_rng(0)
        word = "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=30_000))
    expected = tiktoken_gpt2(release_124M_dir).encode(word, disallowed_special=())
    assert our_encoder(release_124M_dir).encode(word) == expected


def test_random_short_texts_encode_to_the_same_ids_as_the_peer(release_124M_dir):
    """1,000 seeded strings over an alphabet with repeats, spaces, newlines, accents, CJK and emoji."""
    rng = np.random.default_rng(1)
    alphabet = list("abcdeeeetttnnsss ĠāéЖ中😀\n  .,'")
    ours, reference = our_encoder(release_124M_dir), tiktoken_gpt2(release_124M_dir)
    for _ in range(1_000):
        text = "".join(rng.choice(alphabet, size=rng.integers(1, 40)))
        assert ours.encode(text) == reference.encode(text, disallowed_special=()), repr(text)


def test_the_pre_tokenizer_follows_the_regex_package_s_unicode_tables_as_openai_s_encoder_does():
    """U+0558 is a letter in the tables of recent `regex` releases (newer than tiktoken's) and punctuation in
    older ones, such as 2022.1.18, the oldest requirements.txt allows.
    Whichever `regex` is installed, "!" + it + "'s" is cut as that `regex`'s \\p{L} says, as OpenAI's
    encoder.py, which also uses `regex`, cuts it (docs/BENCHMARKS.md, "Which Unicode"): a letter stands alone
    before "'s"; punctuation joins the "!" and the apostrophe."""
    import regex

    letter = regex.fullmatch(r"\p{L}", "\u0558") is not None
    expected = ["!", "\u0558", "'s"] if letter else ["!\u0558'", "s"]
    assert Encoder({}, []).pattern.findall("!\u0558's") == expected, f"regex {regex.__version__}"
