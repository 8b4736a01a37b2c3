"""Watching speculative sampling happen: the colored stream, one trace line per round, a picture of the rounds.

Read sampling.py first, and records.py (a Round and its Checks are what this file draws). main.py decodes a
prompt twice and prints numbers. What speculative sampling does inside a round (Chen et al.'s Algorithm 2:
guesses kept in a run, a rejection, the target's correction, the free token) is made visible here, in three
ways that all read the same `records.Round` records:

    round.k          this round's lookahead (0: a plain target step)
    round.proposal   what the drafter proposed: .tokens and .parents (a chain, or the nodes of a tree)
    round.checks     [Check(depth, token, p, q, u, kept)], in the order Step 3 made them
    round.tokens     the tokens written, in order
    round.origins    one per written token: "draft" (a kept guess), "residual" (drawn from the residual after
                     a rejection), "bonus" (Step 4's free token; also the token of a plain target step)

1. The stream (`TextStream`): each written token's text, as soon as it is complete, colored by its origin:

       kept draft guess: green      the target's token after a rejection: red      free bonus token: blue

   A token is bytes, not characters: GPT-2 splits a character such as "語" or "🙂" over several tokens. The
   stream feeds the bytes to an incremental UTF-8 decoder, which holds back an unfinished character until its
   last byte arrives, so streamed text is exactly `encoder.decode(all tokens)`.

2. The trace (`trace_line`): one line per round that reads next to Algorithm 2, for example (random weights):

       round 2: k=3, drafted "ib" "al" "ice"; guess 1 "ib" p=0.41 q=0.38 u=0.2 kept;
                guess 2 "al" p=0.9 q=0.01 u=0.73 rejected; residual "nice"

   (one line in the terminal). p is the draft's probability of the guess, q the target's (after earlier
   residual updates, for a tree's later candidates), u the uniform draw: a guess is kept when u < q / p.

3. The picture (`plot_rounds`, needs matplotlib): one row per round, one box per token, in the order the
   round handled them: the kept guesses (green), a rejected guess (faded), the residual's token (red) or the
   bonus token (blue), then the guesses that were never checked (faded).

Colors are ANSI escape codes (`paint`). `wants_color` decides whether to use them: "always", "never", or
"auto" (only when writing to a terminal and the environment variable NO_COLOR is unset or empty, as
https://no-color.org asks). Removing the codes (`strip_colors`) from colored output gives exactly the
uncolored output: colors never add or remove a character.
"""

import codecs
import os
import re
import textwrap

from loaders.safe_files import save_figure

# ------------------------------------------------------------------------------------------------------------
# Colors
# ------------------------------------------------------------------------------------------------------------

# ANSI "select graphic rendition" codes: ESC [ code m switches a style on, ESC [ 0 m resets it.
ANSI_CODES = {"draft": "32", "residual": "31", "bonus": "34", "rejected": "2", "unchecked": "2"}  # 2 = faint
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
COLOR_MODES = ("auto", "always", "never")


def wants_color(mode, stream, environ=None):
    """Whether to color output written to `stream`: mode "always", "never", or "auto".

    "auto" colors only when the stream is a terminal and NO_COLOR is unset or empty (https://no-color.org).
    >>> import io; wants_color("auto", io.StringIO())  # not a terminal
    False
    """
    if mode not in COLOR_MODES:
        raise ValueError(f"--color must be one of {', '.join(COLOR_MODES)}; got {mode!r}")
    if mode != "auto":
        return mode == "always"
    environ = os.environ if environ is None else environ
    is_terminal = getattr(stream, "isatty", lambda: False)()
    return bool(is_terminal) and not environ.get("NO_COLOR")


def paint(text, style, color):
    """text wrapped in the ANSI codes of `style` ("draft", "residual", "bonus", "rejected") if color is True.

    >>> paint("hi", "draft", True)
    '\\x1b[32mhi\\x1b[0m'
    >>> paint("hi", "draft", False)
    'hi'
    """
    if not color or not text:
        return text
    return f"\x1b[{ANSI_CODES[style]}m{text}\x1b[0m"


def strip_colors(text):
    """text without ANSI color codes: strip_colors(paint(s, style, True)) == s."""
    return ANSI_ESCAPE.sub("", text)


def legend(color):
    """The one legend line printed before the speculative text (the same words with and without color)."""
    return (f"colors: {paint('green', 'draft', color)} = a draft guess the target kept, "
            f"{paint('red', 'residual', color)} = the target's token after a rejection, "
            f"{paint('blue', 'bonus', color)} = the free token after a round that kept every guess "
            f"(shown on a terminal, or with --color always)")


# ------------------------------------------------------------------------------------------------------------
# The stream: text as soon as it is complete
# ------------------------------------------------------------------------------------------------------------


class TextStream:
    """Write tokens' text to `out` as they come, colored by origin, holding back unfinished UTF-8 characters.

    token_bytes(token) -> bytes: the bytes a token stands for (GPT-2's tokens are byte sequences).
    Worked example: "é" is the two bytes C3 A9. If one token is b"caf\\xc3" and the next b"\\xa9!", the first
    write prints "caf" and keeps C3; the second completes "é" and prints "é!". Bytes that never form a
    character become U+FFFD, as `encoder.decode` does, so the whole stream equals encoder.decode(tokens).
    """

    def __init__(self, token_bytes, out, color=False):
        self.token_bytes = token_bytes
        self.out = out
        self.color = color
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.style = "bonus"  # the style of the bytes held back (used if finish() flushes them)

    def write(self, tokens, origins=None):
        """Print the text that `tokens` complete; origins (one per token) color it (None: no color)."""
        pieces = []
        for i, token in enumerate(tokens):
            style = origins[i] if origins is not None else None
            text = self.decoder.decode(self.token_bytes(token))
            pieces.append(paint(text, style, self.color and style is not None))
            self.style = style
        self.out.write("".join(pieces))
        self.out.flush()

    def finish(self):
        """Flush what is held back (an unfinished character becomes U+FFFD) and end the line."""
        text = self.decoder.decode(b"", final=True)
        self.out.write(paint(text, self.style, self.color and self.style is not None) + "\n")
        self.out.flush()


# ------------------------------------------------------------------------------------------------------------
# The trace: one line per round
# ------------------------------------------------------------------------------------------------------------


def token_text(token, token_bytes):
    """A token's text in double quotes, readable on one line: newlines as \\n, broken UTF-8 bytes as \\xNN.

    >>> token_text(0, lambda t: b"a\\nb\\xc3")
    '"a\\\\nb\\\\xc3"'
    """
    text = token_bytes(token).decode("utf-8", errors="backslashreplace")
    return '"' + text.translate({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"'}) + '"'


def node_depths(parents):
    """The 1-based depth of each node of a proposal: node_depths([-1, -1, 0, 1]) == [1, 1, 2, 2]."""
    depths = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def _number(value):
    """p, q, u in at most 3 significant digits: 0.41, 1, 3.2e-05."""
    return f"{value:.3g}"


def drafted_text(proposal, token_bytes):
    """The proposed tokens as quoted text; a tree's depths are separated by " | " (a chain has no bars)."""
    depths = node_depths(list(proposal.parents))
    quoted = [token_text(token, token_bytes) for token in proposal.tokens]
    if all(depth == i + 1 for i, depth in enumerate(depths)):  # a chain: one token per depth
        return " ".join(quoted)
    by_depth = {}
    for depth, text in zip(depths, quoted):
        by_depth.setdefault(depth, []).append(text)
    return " | ".join(" ".join(texts) for _, texts in sorted(by_depth.items()))


def trace_line(rnd, token_bytes, color=False):
    """One line for one Round: `round N: k=.., drafted ..; guess d "t" p=.. q=.. u=.. kept|rejected; ...; END`.

    END is `residual "t"` (a rejection ended the round), `bonus "t"` (every checked guess on the way was kept),
    `plain target step "t"` (nothing was proposed), or `stop token reached` when the stop token cut the round.
    Kept guesses are green, rejected ones faint, the residual's token red, the bonus token blue.
    """
    parts = [f"round {rnd.index}: k={rnd.k}"]
    if rnd.proposal.tokens:
        parts[0] += f", drafted {drafted_text(rnd.proposal, token_bytes)}"
    else:
        parts[0] += ", nothing drafted"
    n_written_guesses = sum(origin == "draft" for origin in rnd.origins)
    n_kept = 0
    for check in rnd.checks:
        kept = check.kept and n_kept < n_written_guesses
        n_kept += check.kept
        style = "draft" if kept else "rejected"
        verdict = "kept" if check.kept else "rejected"
        parts.append(f"guess {check.depth} {paint(token_text(check.token, token_bytes), style, color)} "
                     f"p={_number(check.p)} q={_number(check.q)} u={_number(check.u)} {verdict}")
    last = [(token, origin) for token, origin in zip(rnd.tokens, rnd.origins) if origin != "draft"]
    if last:
        token, origin = last[-1]
        name = "plain target step" if origin == "bonus" and not rnd.proposal.tokens else origin
        parts.append(f"{name} {paint(token_text(token, token_bytes), origin, color)}")
    else:
        parts.append("stop token reached")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------------------------
# The picture: one row per round
# ------------------------------------------------------------------------------------------------------------


def round_boxes(rnd):
    """The boxes of one round's row, in the order the round handled them: [(token, style)].

    style: "draft" (a kept guess that was written), "rejected" (a guess the test threw away, or a kept guess
    after the stop token), "residual" / "bonus" (the round's last token), "unchecked" (a proposed token never
    put to the test: after a rejection in a chain, or a tree's branches off the accepted path).
    """
    n_written_guesses = sum(origin == "draft" for origin in rnd.origins)
    boxes, n_kept = [], 0
    checked = set()
    for check in rnd.checks:
        written = check.kept and n_kept < n_written_guesses
        n_kept += written
        boxes.append((check.token, "draft" if written else "rejected"))
        checked.add(_node_of(rnd.proposal, check, checked))
    boxes += [(token, origin) for token, origin in zip(rnd.tokens, rnd.origins) if origin != "draft"]
    boxes += [(token, "unchecked") for i, token in enumerate(rnd.proposal.tokens) if i not in checked]
    return boxes


def _node_of(proposal, check, taken):
    """The index of the proposal node a check tested: the first not yet taken with its depth and token."""
    depths = node_depths(list(proposal.parents))
    for i, (token, depth) in enumerate(zip(proposal.tokens, depths)):
        if i not in taken and token == check.token and depth == check.depth:
            return i
    return None


# matplotlib colors of the picture: the stream's green, red, blue; thrown-away guesses faded grey
BOX_COLORS = {"draft": "#2ca02c", "residual": "#d62728", "bonus": "#1f77b4", "rejected": "#bbbbbb",
              "unchecked": "#e5e5e5"}
BOX_LABELS = {"draft": "kept draft guess", "residual": "target's token after a rejection",
              "bonus": "free bonus token", "rejected": "rejected guess", "unchecked": "guess never checked"}


def import_matplotlib():
    """matplotlib's Figure and Agg canvas, or a ValueError with the one line that says how to install it."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch, Rectangle
    except ImportError:
        raise ValueError("--plot needs matplotlib, an optional extra: pip install -r requirements/plots.txt") from None
    return Figure, FigureCanvasAgg, Patch, Rectangle


def box_label(token, token_bytes, width=10):
    """The text inside a token's box: at most `width` characters, spaces shown as "·" so they can be seen."""
    text = token_bytes(token).decode("utf-8", errors="backslashreplace").replace(" ", "·").replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def plot_rounds(rounds, token_bytes, path, title=""):
    """Write a picture of the rounds to `path` (format from its suffix, e.g. .png): one row per round.

    Each box is one token (see `round_boxes`), as wide as its label, its color saying what became of it (the
    legend). Round 1 is the top row.
    """
    Figure, FigureCanvasAgg, Patch, Rectangle = import_matplotlib()
    rows = [round_boxes(rnd) for rnd in rounds]
    char_width = 0.11  # inches per label character at fontsize 7
    widths = [[0.25 + char_width * len(box_label(token, token_bytes)) for token, _ in row] for row in rows]
    total_width = max([sum(row) + 0.05 * len(row) for row in widths] + [1.0])
    figure = Figure(figsize=(max(6.5, 1.3 + total_width), 1.3 + 0.28 * max(len(rows), 1)))
    FigureCanvasAgg(figure)
    figure_width, figure_height = figure.get_size_inches()
    axes = figure.add_axes([1.0 / figure_width, 0.8 / figure_height, 1 - 1.3 / figure_width,
                            1 - 1.2 / figure_height])  # margins in inches
    for r, (row, row_widths) in enumerate(zip(rows, widths)):
        x, y = 0.0, -r
        for (token, style), box_width in zip(row, row_widths):
            faded = style in ("rejected", "unchecked")
            axes.add_patch(Rectangle((x, y - 0.4), box_width, 0.8, facecolor=BOX_COLORS[style],
                                     edgecolor="#999999" if faded else "white", linewidth=0.5))
            axes.text(x + box_width / 2, y, box_label(token, token_bytes), ha="center", va="center", fontsize=7,
                      color="#777777" if faded else "white")
            x += box_width + 0.05
    axes.set_xlim(-0.05, max(total_width, figure_width - 1.3))
    axes.set_ylim(-len(rows) + 0.4, 0.6)
    axes.set_yticks([-r for r in range(len(rows))], [f"round {rnd.index}" for rnd in rounds], fontsize=7)
    axes.set_xticks([])
    for side in ("top", "right", "bottom"):
        axes.spines[side].set_visible(False)
    axes.set_title(textwrap.fill(title, int((figure_width - 1.3) / 0.07)), fontsize=8)  # long paths: two lines
    figure.legend(handles=[Patch(facecolor=BOX_COLORS[s], label=BOX_LABELS[s]) for s in BOX_COLORS],
                  loc="lower center", ncol=3, fontsize=7, frameon=False)
    save_figure(figure, path, dpi=150)
