"""show.py: the colored stream, the trace lines and the picture, on Round records made by hand.

Read show.py first: these tests are its specification.

The rounds below are written out from Algorithm 2 by hand, with a 6-token vocabulary whose tokens stand for
the bytes in TOKEN_BYTES (tokens 4 and 5 are the two halves of the UTF-8 character "é" = C3 A9).
"""

import io

import pytest

from records import Check, Round
from sampling import Proposal
from show import (
    TextStream,
    legend,
    node_depths,
    paint,
    plot_rounds,
    round_boxes,
    strip_colors,
    token_text,
    trace_line,
    wants_color,
)

TOKEN_BYTES = {0: b" the", 1: b" cat", 2: b" sat", 3: b"\n", 4: b" caf\xc3", 5: b"\xa9!"}


def token_bytes(token):
    return TOKEN_BYTES[token]


def chain(tokens):
    return Proposal(tokens=list(tokens), parents=list(range(-1, len(tokens) - 1)), rows=None)


# round 1: guesses " the" " cat" " sat"; " the" kept, " cat" rejected (u 0.9 >= q/p = 0.1/0.5), residual "\n"
ROUND_REJECTED = Round(index=1, k=3, proposal=chain([0, 1, 2]),
                       checks=[Check(1, 0, 0.5, 0.6, 0.3, True), Check(2, 1, 0.5, 0.1, 0.9, False)],
                       tokens=[0, 3], origins=["draft", "residual"])
# round 2: both guesses kept, then the bonus token
ROUND_ALL_KEPT = Round(index=2, k=2, proposal=chain([4, 5]),
                       checks=[Check(1, 4, 1.0, 1.0, 0.5, True), Check(2, 5, 1.0, 0.7, 0.2, True)],
                       tokens=[4, 5, 2], origins=["draft", "draft", "bonus"])
# round 3: nothing proposed (a lookup that found no match): a plain target step
ROUND_PLAIN = Round(index=3, k=0, proposal=Proposal(tokens=[], parents=[], rows=None), checks=[],
                    tokens=[1], origins=["bonus"])
# round 4: a tree: two candidates at depth 1 (" the" rejected, " cat" kept), one under each; " sat" under " cat"
# is kept, then the bonus
ROUND_TREE = Round(index=4, k=2, proposal=Proposal(tokens=[0, 1, 3, 2], parents=[-1, -1, 0, 1], rows=None),
                   checks=[Check(1, 0, 1.0, 0.2, 0.5, False), Check(1, 1, 1.0, 1.0, 0.1, True),
                           Check(2, 2, 1.0, 0.9, 0.3, True)],
                   tokens=[1, 2, 0], origins=["draft", "draft", "bonus"])
ROUNDS = [ROUND_REJECTED, ROUND_ALL_KEPT, ROUND_PLAIN, ROUND_TREE]


# ------------------------------------------------------------------------------------------------------------
# Colors
# ------------------------------------------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_auto_colors_a_terminal_only_when_no_color_is_unset_or_empty():
    assert wants_color("auto", FakeTerminal(), environ={}) is True
    assert wants_color("auto", FakeTerminal(), environ={"NO_COLOR": ""}) is True  # no-color.org: empty = unset
    assert wants_color("auto", FakeTerminal(), environ={"NO_COLOR": "1"}) is False
    assert wants_color("auto", io.StringIO(), environ={}) is False  # a pipe or a file
    assert wants_color("always", io.StringIO(), environ={"NO_COLOR": "1"}) is True
    assert wants_color("never", FakeTerminal(), environ={}) is False
    with pytest.raises(ValueError, match="--color must be one of auto, always, never"):
        wants_color("sometimes", io.StringIO())


def test_the_legend_names_the_three_colors_and_stripped_it_is_the_plain_legend():
    assert strip_colors(legend(True)) == legend(False)
    assert "\x1b[" in legend(True) and "\x1b[" not in legend(False)
    for words in ("green = a draft guess the target kept", "red = the target's token after a rejection",
                  "blue = the free token"):
        assert words in legend(False)


# ------------------------------------------------------------------------------------------------------------
# The stream
# ------------------------------------------------------------------------------------------------------------


def stream_rounds(rounds, color):
    out = io.StringIO()
    stream = TextStream(token_bytes, out, color=color)
    for rnd in rounds:
        stream.write(rnd.tokens, rnd.origins)
    stream.finish()
    return out.getvalue()


def test_the_stripped_colored_stream_is_the_plain_stream_character_for_character():
    colored, plain = stream_rounds(ROUNDS, color=True), stream_rounds(ROUNDS, color=False)
    assert "\x1b[" in colored and "\x1b[" not in plain
    assert strip_colors(colored) == plain
    expected = b"".join(TOKEN_BYTES[t] for rnd in ROUNDS for t in rnd.tokens).decode("utf-8") + "\n"
    assert plain == expected


def test_each_origin_has_its_color():
    """Round 1 writes " the" (kept: green) then "\\n" (residual: red); round 3's plain step is blue."""
    first_round = paint(" the", "draft", True) + paint("\n", "residual", True)
    assert stream_rounds([ROUND_REJECTED], True).startswith(first_round)
    assert stream_rounds([ROUND_PLAIN], True) == "\x1b[34m cat\x1b[0m\n"
    assert paint(" the", "draft", True) == "\x1b[32m the\x1b[0m"
    assert paint("x", "residual", True) == "\x1b[31mx\x1b[0m"


def test_a_character_split_across_tokens_is_printed_once_it_is_complete():
    """" caf" + C3 | A9 + "!": the first write must print " caf" only, the second "é!"."""
    out = io.StringIO()
    stream = TextStream(token_bytes, out)
    stream.write([4])
    assert out.getvalue() == " caf"
    stream.write([5])
    assert out.getvalue() == " café!"


def test_streaming_byte_sequences_in_any_split_gives_what_one_decode_gives():
    """Random bytes (valid and broken UTF-8) cut into random tokens: the stream == bytes.decode(errors=replace)."""
    import numpy as np

    rng = np.random.default_rng(0)
    alphabet = ["é", "🙂", "a", " ", "中"]
    for _ in range(200):
        text = "".join(rng.choice(alphabet, size=8)).encode("utf-8")
        data = bytearray(text)
        if rng.random() < 0.5:
            data.insert(int(rng.integers(len(data) + 1)), int(rng.integers(128, 256)))  # a stray byte
        cuts = sorted(rng.choice(np.arange(1, len(data)), size=3, replace=False))
        pieces = [bytes(data[a:b]) for a, b in zip([0, *cuts], [*cuts, len(data)])]
        out = io.StringIO()
        stream = TextStream(lambda t: pieces[t], out)
        for token in range(len(pieces)):
            stream.write([token], ["draft"])
        stream.finish()
        assert out.getvalue() == bytes(data).decode("utf-8", errors="replace") + "\n"


# ------------------------------------------------------------------------------------------------------------
# The trace
# ------------------------------------------------------------------------------------------------------------


def test_a_trace_line_reads_like_algorithm_2():
    assert trace_line(ROUND_REJECTED, token_bytes) == (
        'round 1: k=3, drafted " the" " cat" " sat"; guess 1 " the" p=0.5 q=0.6 u=0.3 kept; '
        'guess 2 " cat" p=0.5 q=0.1 u=0.9 rejected; residual "\\n"'
    )
    assert trace_line(ROUND_ALL_KEPT, token_bytes).endswith('kept; bonus " sat"')
    assert '" caf\\xc3" "\\xa9!"' in trace_line(ROUND_ALL_KEPT, token_bytes)  # half characters as bytes
    assert trace_line(ROUND_PLAIN, token_bytes) == 'round 3: k=0, nothing drafted; plain target step " cat"'


def test_a_tree_trace_separates_depths_and_tries_siblings_in_turn():
    line = trace_line(ROUND_TREE, token_bytes)
    assert line.startswith('round 4: k=2, drafted " the" " cat" | "\\n" " sat"; guess 1 " the" p=1 q=0.2 u=0.5 '
                           'rejected; guess 1 " cat" p=1 q=1 u=0.1 kept; guess 2 " sat"')
    assert line.endswith('bonus " the"')


def test_trace_lines_count_the_kept_guesses_and_strip_to_the_plain_lines():
    lines = [trace_line(rnd, token_bytes, color=True) for rnd in ROUNDS]
    plain = [trace_line(rnd, token_bytes) for rnd in ROUNDS]
    assert [strip_colors(line) for line in lines] == plain
    assert sum(line.count(" kept") for line in plain) == sum(o == "draft" for r in ROUNDS for o in r.origins) == 5
    assert [line.split(":")[0] for line in plain] == ["round 1", "round 2", "round 3", "round 4"]


def test_token_text_quotes_and_escapes():
    assert token_text(3, token_bytes) == '"\\n"'
    assert token_text(0, lambda t: b'say "hi"') == '"say \\"hi\\""'
    assert node_depths([-1, 0, 1]) == [1, 2, 3] and node_depths([-1, -1, 0, 1, 2]) == [1, 1, 2, 2, 3]


# ------------------------------------------------------------------------------------------------------------
# The picture
# ------------------------------------------------------------------------------------------------------------


def test_a_rounds_row_lists_its_tokens_in_the_order_the_round_handled_them():
    assert round_boxes(ROUND_REJECTED) == [(0, "draft"), (1, "rejected"), (3, "residual"), (2, "unchecked")]
    assert round_boxes(ROUND_ALL_KEPT) == [(4, "draft"), (5, "draft"), (2, "bonus")]
    assert round_boxes(ROUND_PLAIN) == [(1, "bonus")]
    assert round_boxes(ROUND_TREE) == [(0, "rejected"), (1, "draft"), (2, "draft"), (0, "bonus"),
                                       (3, "unchecked")]


def test_the_picture_is_written_as_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "rounds.png"
    plot_rounds(ROUNDS, token_bytes, path, title="hand-made rounds")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
