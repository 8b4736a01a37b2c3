"""GPT-2's tokenizer: byte-level Byte-Pair Encoding (BPE), written out step by step.

It stands on its own (read it before or after gpt2.py); model_fn.py and sampling.py never see text, only ids.

GPT-2 reads integers, not text. Turning text into those integers ("token ids") takes four steps:

1. Pre-tokenize: a regular expression cuts the text into words, numbers, punctuation runs and whitespace,
   each with at most one leading space. BPE never merges across these pieces.
2. Bytes to characters: each piece is encoded as UTF-8 bytes, and each byte is shown as one printable
   character (`bytes_to_unicode`), e.g. the space byte becomes "Ġ". Any text, in any script, becomes a
   string over only 256 symbols, so nothing is ever "unknown".
3. Merge: starting from single characters, repeatedly join the adjacent pair that comes first in the merge
   list `vocab.bpe` (its position there is its "rank", 0 = merged first) until no pair of neighbours in the
   piece is in the list (`Encoder.bpe`). Text repeats words, so each piece's result is kept in a cache.
4. Look up: each merged symbol is a key of `encoder.json`, whose value is the token id.

Worked example with OpenAI's files, "Hello world!":

    pre-tokens      ["Hello", " world", "!"]
    as characters   ["Hello", "Ġworld", "!"]
    merges          "Hello":  H e l l o -> H e ll o -> H ell o -> H ello -> Hello
                              (ranks of the merged pairs: 41, 439, 10853, 15240)
                    "Ġworld": Ġ w o r l d -> Ġw o r l d -> Ġw or l d -> Ġw or ld -> Ġwor ld -> Ġworld
                              (ranks 10, 17, 79, 220, 739)
                    "!":      a single character, nothing to merge
    ids             [15496, 995, 0]

Decoding runs the table backwards: ids -> symbols -> characters -> bytes -> UTF-8 text.
This follows OpenAI's gpt-2/src/encoder.py and minGPT's bpe.py, and equals tiktoken's "gpt2" encoding.
"""

import heapq
import json
import os

import regex

# OpenAI's pre-tokenizer: English contractions (lower case only: "I'M" -> "I", "'", "M"), then runs of letters,
# digits, other symbols (each optionally after one space), then whitespace. `\s+(?!\S)` leaves the last space
# of a run to the word that follows it: "a   b" -> "a", "  ", " b".
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    """Return {byte: character}, a one-to-one table that shows each of the 256 byte values as a printable character.

    Printable Latin-1 bytes ("!".."~", "¡".."¬", "®".."ÿ") stand for themselves; the 68 others (control
    characters, space, ...) take the characters chr(256), chr(257), ... in order. So 32 (space) -> "Ġ" (chr(288)),
    10 ("\\n") -> "Ċ", and b"Hi there" -> "HiĠthere". vocab.bpe and encoder.json are written in these characters.
    """
    printable_bytes = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable_bytes += list(range(ord("®"), ord("ÿ") + 1))
    byte_to_char = {b: chr(b) for b in printable_bytes}
    n_shifted = 0
    for b in range(256):
        if b not in byte_to_char:
            byte_to_char[b] = chr(256 + n_shifted)
            n_shifted += 1
    return byte_to_char


class Encoder:
    """Text <-> token ids, given `encoder` ({symbol: id}, from encoder.json) and `bpe_merges` ([(left, right)],
    from vocab.bpe, best first)."""

    def __init__(self, encoder, bpe_merges):
        self.encoder = encoder  # {"Hello": 15496, "Ġworld": 995, ...}
        self.decoder = {token_id: symbol for symbol, token_id in encoder.items()}
        self.byte_encoder = bytes_to_unicode()  # {32: "Ġ", ...}
        self.byte_decoder = {char: b for b, char in self.byte_encoder.items()}
        self.bpe_ranks = {pair: rank for rank, pair in enumerate(bpe_merges)}  # {("Ġ", "t"): 0, ...}
        self.pattern = regex.compile(GPT2_PATTERN)
        self.cache = {}  # {pre-token as characters: its merged symbols}; a word seen twice is merged once

    def bpe(self, token):
        """Merge the characters of one pre-token, lowest rank first; return the tuple of symbols.

        "Ġworld": of the pairs (Ġ,w) (w,o) (o,r) (r,l) (l,d), (Ġ,w) has the lowest rank (10): Ġw o r l d;
        then (o,r) (rank 17): Ġw or l d; (l,d) (79): Ġw or ld; (Ġw,or) (220): Ġwor ld; (Ġwor,ld) (739): Ġworld.
        One symbol is left, so the result is ("Ġworld",). A pair absent from vocab.bpe is never merged.

        The rule (OpenAI's encoder.py): while some pair of neighbours is in the merge list, take the pair of
        lowest rank and merge every occurrence of it, left to right. Rescanning the word for the best pair
        after every merge costs O(n) per merge, O(n^2) per word: minutes for a 100,000-letter "word". So the
        symbols are a linked list and the pairs wait in a heap by (rank, position): each step pops ALL the
        pairs of the lowest rank, merges those still present left to right (one of two overlapping
        occurrences, as in "a a a", is gone once its left twin has merged), and pushes the new pairs the
        merged symbols make with their neighbours. O(n log n) per word, and the same merges as the rescan.
        """
        if token in self.cache:
            return self.cache[token]
        symbols = list(token)  # symbols[i]: the symbol that starts at character i ("" once merged away)
        next_start = list(range(1, len(token) + 1))  # the start of the symbol after i (len(token): none)
        prev_start = list(range(-1, len(token) - 1))  # the start of the symbol before i (-1: none)
        heap = []  # (rank, start of the left symbol, left symbol, right symbol) for each pair in the list

        def push_pair(left):
            right = next_start[left]
            if right < len(token):
                rank = self.bpe_ranks.get((symbols[left], symbols[right]))
                if rank is not None:
                    heapq.heappush(heap, (rank, left, symbols[left], symbols[right]))

        for start in range(len(token) - 1):
            push_pair(start)
        while heap:
            rank = heap[0][0]
            batch = []  # every pair of this rank, by position: "merge every occurrence, left to right"
            while heap and heap[0][0] == rank:
                batch.append(heapq.heappop(heap))
            merged = []
            for _, left, first, second in sorted(batch, key=lambda pair: pair[1]):
                right = next_start[left]
                still_there = symbols[left] == first and right < len(token) and symbols[right] == second
                if not still_there:  # merged away by an overlapping occurrence to its left, or a stale entry
                    continue
                symbols[left], symbols[right] = first + second, ""  # the right symbol joins the left one
                next_start[left] = next_start[right]
                if next_start[left] < len(token):
                    prev_start[next_start[left]] = left
                merged.append(left)
            for left in merged:  # the pairs the merged symbols now make with their neighbours
                if symbols[left]:
                    if prev_start[left] >= 0:
                        push_pair(prev_start[left])
                    push_pair(left)
        word = tuple(symbol for symbol in symbols if symbol)  # ("Ġworld",)
        self.cache[token] = word
        return word

    def encode(self, text):
        """Return the token ids of `text`: "Hello world!" -> [15496, 995, 0]. "<|endoftext|>" is plain text here."""
        ids = []
        for pre_token in self.pattern.findall(text):  # "Hello world!" -> "Hello", " world", "!"
            chars = "".join(self.byte_encoder[b] for b in pre_token.encode("utf-8"))  # " world" -> "Ġworld"
            symbols = self.bpe(chars)  # "Ġworld" -> ("Ġworld",)
            ids.extend(self.encoder[symbol] for symbol in symbols)  # -> [995]
        return ids

    def decode(self, ids):
        """Return the text of `ids`: [15496, 995, 0] -> "Hello world!". Bytes that are not valid UTF-8 (a token
        sequence cut inside a character) become U+FFFD, the replacement character "�"."""
        unknown = [token_id for token_id in ids if token_id not in self.decoder]
        if unknown:
            raise ValueError(f"token ids {unknown[:5]} are not in the vocabulary (ids 0..{len(self.decoder) - 1})")
        chars = "".join(self.decoder[token_id] for token_id in ids)  # "HelloĠworld!"
        return bytes(self.byte_decoder[c] for c in chars).decode("utf-8", errors="replace")


MAX_VOCABULARY_FILE_BYTES = 32 << 20  # GPT-2's encoder.json is 1.0 MB, vocab.bpe 0.5 MB; this is room for many times that


def read_text_file(path):
    """Return the UTF-8 text of a vocabulary file (at most MAX_VOCABULARY_FILE_BYTES), or raise ValueError naming it."""
    if not os.path.isfile(path):  # a folder, a pipe that would never end: not a vocabulary file
        raise ValueError(f"GPT-2 vocabulary file {path} is missing or not a file; download or copy it again")
    try:
        size = os.path.getsize(path)
        if size > MAX_VOCABULARY_FILE_BYTES:
            raise ValueError(f"GPT-2 vocabulary file {path} has {size} bytes, more than the "
                             f"{MAX_VOCABULARY_FILE_BYTES} a vocabulary file may have; download or copy it again")
        with open(path, encoding="utf-8") as f:
            return f.read(MAX_VOCABULARY_FILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read GPT-2 vocabulary file {path} ({err}); download or copy it again") from None


def load_vocab(path):
    """Read encoder.json (Hugging Face: vocab.json): {symbol: id}, e.g. {"!": 0, ..., "<|endoftext|>": 50256}."""
    text = read_text_file(path)
    try:
        vocab = json.loads(text)
    except (ValueError, RecursionError) as err:  # not JSON, nested too deep, a number of 5,000 digits
        raise ValueError(f"GPT-2 vocabulary file {path} is not valid JSON ({type(err).__name__}: {err}); "
                         f"download it again") from None
    if not isinstance(vocab, dict) or not all(type(i) is int for i in vocab.values()):
        raise ValueError(f"GPT-2 vocabulary file {path} must hold a JSON object {{symbol: id}}; download it again")
    return vocab


def load_merges(path):
    """Read vocab.bpe (Hugging Face: merges.txt): a "#version" line, then one merge "left right" per line."""
    lines = read_text_file(path).split("\n")
    first_line = 1 if lines[0].startswith("#version") else 0
    merges = []
    for line_number, line in enumerate(lines[first_line:], start=first_line + 1):
        if not line.strip():
            continue  # the file ends with a newline
        symbols = line.split()
        if len(symbols) != 2:
            message = f"line {line_number} of GPT-2 merges file {path} is {line[:60]!r}: expected two symbols"
            raise ValueError(message + "; download it again")
        merges.append(tuple(symbols))
    return merges


def check_vocabulary(vocab, merges, vocab_path, merges_path):
    """ValueError unless the two files are one byte-level BPE tokenizer: the ids are 0 .. len(vocab) - 1, each
    once; every symbol a merge makes is in the vocabulary; and every symbol of the vocabulary is one of the
    256 byte characters, made by a merge, or a special token written <|...|> (GPT-2's only one is
    <|endoftext|>). So a merges file cut short, emptied, or taken from another model is refused: GPT-2's
    50,257 symbols are exactly 256 bytes + 50,000 merges + 1 special token."""
    ids = set(vocab.values())
    if len(ids) != len(vocab) or min(ids, default=0) != 0 or max(ids, default=-1) != len(vocab) - 1:
        raise ValueError(f"GPT-2 vocabulary file {vocab_path} does not number its {len(vocab)} symbols 0 .. "
                         f"{len(vocab) - 1}, each once; download it again")
    byte_symbols = set(bytes_to_unicode().values())
    made = [left + right for left, right in merges]
    missing = [symbol for symbol in list(byte_symbols) + made if symbol not in vocab]
    if missing:
        raise ValueError(
            f"GPT-2 vocabulary file {vocab_path} lacks symbols that {merges_path} makes ({len(missing)} of them, "
            f"first {missing[0][:60]!r}): are both files from the same model? Download them again"
        )
    made = set(made)
    unmade = [s for s in vocab if s not in byte_symbols and s not in made and not (s[:2] == "<|" and s[-2:] == "|>")]
    if unmade:
        raise ValueError(
            f"GPT-2 merges file {merges_path} makes none of {len(unmade)} symbols of {vocab_path} (first "
            f"{unmade[0][:60]!r}): it is cut short, empty, or from another model; download it again"
        )


def get_encoder(model_size, models_dir):
    """Return the Encoder of the folder os.path.join(models_dir, model_size) (any folder; an absolute
    `model_size` is used as it is).

    It holds OpenAI's encoder.json + vocab.bpe, or a Hugging Face GPT-2 folder's vocab.json + merges.txt
    (the same contents under other names). Missing, malformed or mismatched files (check_vocabulary) raise
    ValueError naming the file.
    """
    folder = os.path.join(models_dir, model_size)
    vocab_path, merges_path = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")  # Hugging Face
    if not os.path.lexists(vocab_path):  # OpenAI's names, in a folder without Hugging Face's
        vocab_path, merges_path = os.path.join(folder, "encoder.json"), os.path.join(folder, "vocab.bpe")
    if not os.path.lexists(vocab_path):
        raise ValueError(
            f"{folder} has no GPT-2 vocabulary: expected encoder.json + vocab.bpe (OpenAI's release files) "
            f"or vocab.json + merges.txt (a Hugging Face GPT-2 folder)"
        )
    vocab, merges = load_vocab(vocab_path), load_merges(merges_path)
    check_vocabulary(vocab, merges, vocab_path, merges_path)
    return Encoder(vocab, merges)
