"""The pages' generated parts: writing them between their marks, moving line links, and the text helpers (a tool).

Read tools/make_readme_figures.py first: it computes the parts and calls these to write them into README.md and
docs/BENCHMARKS.md. Every part is written between two marks,

    <!-- NAME: begin (the command that wrote it) -->
    ...
    <!-- NAME: end -->

and nothing outside the marks is touched: the pages' prose decides where a part goes.
"""

import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------------------------
# Writing into the pages
# ------------------------------------------------------------------------------------------------------------


def replace_block(text, name, content, command):
    """text with the part between `<!-- name: begin ... -->` and `<!-- name: end -->` replaced by content.

    The begin mark records the command that wrote the part. A part inside a list item has its marks indented,
    and its content is indented as they are. A missing mark is a ValueError: the page's prose decides where
    a generated part goes, not this script.
    """
    pattern = part_pattern(name)
    if not pattern.search(text):
        raise ValueError(f"the page has no <!-- {name}: begin --> ... <!-- {name}: end --> marks: add them where "
                         f"the part should go")
    block = f"<!-- {name}: begin ({command}) -->\n{content.rstrip()}\n<!-- {name}: end -->"
    return pattern.sub(lambda match: textwrap.indent(block, match.group(1)), text, count=1)


def part_pattern(name):
    """The regular expression of a part with its marks: group 1 the marks' indent, group 2 what is between them."""
    return re.compile(rf"^([ \t]*)<!-- {re.escape(name)}: begin[^>]*-->\n(.*?)^[ \t]*<!-- {re.escape(name)}: end -->",
                      re.S | re.M)


def read_part(texts, name):
    """The text between NAME's marks in the first of the pages ({page: text}) that has them, or ''."""
    for text in texts.values():
        match = part_pattern(name).search(text)
        if match:
            return match.group(2)
    return ""


def write_parts(texts, blocks, command):
    """{page: text} with each block between its marks, in every page that has them (the machine part is in
    both). A block that no page marks is a ValueError: the pages' prose decides where a part goes."""
    texts = dict(texts)
    for name, content in blocks.items():
        marked = [page for page, text in texts.items() if f"<!-- {name}: begin" in text]
        if not marked:
            raise ValueError(f"no page of {', '.join(map(str, texts))} has <!-- {name}: begin --> ... "
                             f"<!-- {name}: end --> marks: add them where the part should go")
        for page in marked:
            texts[page] = replace_block(texts[page], name, content, command)
    return texts


LINK = re.compile(r"\[`([^`]+)`([^\]]*)\]\((\w+\.py)#L(\d+)\)")


def fix_line_links(text, root=REPO):
    """Point every [`code` ...](file.py#LN) link at the first line of file.py that holds `code`.

    A link whose line still holds its code stays as it is (so a name defined twice keeps the chosen line).
    Example: [`def _accept`](sampling.py#L400) becomes [`def _accept`](sampling.py#L419) when the def moved.
    """

    def fix(match):
        code, rest, path, line = match.group(1), match.group(2), match.group(3), int(match.group(4))
        lines = (Path(root) / path).read_text(encoding="utf-8").splitlines()
        if line <= len(lines) and code in lines[line - 1]:
            return match.group(0)
        found = [i + 1 for i, source in enumerate(lines) if code in source]
        if not found:
            raise ValueError(f"the README links to `{code}` in {path}, which no line of {path} holds any more: "
                             f"fix the link by hand")
        return f"[`{code}`{rest}]({path}#L{found[0]})"

    return LINK.sub(fix, text)


# ------------------------------------------------------------------------------------------------------------
# Numbers and sentences as the pages print them
# ------------------------------------------------------------------------------------------------------------


def span(values, fmt="{:.2f}"):
    """'0.60–0.84' (or '0.60' when all are equal), of the values that are not None."""
    values = [v for v in values if v is not None]
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}–{high}"


def ratio_text(values, fmt="{:.2f}"):
    """'1.42–2.20×': the span of some ratios."""
    return span(values, fmt) + "×"


def sizes_text(sizes):
    """'124M', '124M and 355M', '124M, 355M and 774M'."""
    return sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} and {sizes[-1]}"


def fmt_alpha(alpha):
    return "never" if alpha is None else f"{alpha:.2f}"


def duration_text(seconds):
    """'1.4 µs' under a millisecond, else '24.0 ms'."""
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.1f} ms"


def scientific(x, digits=1):
    """scientific(3.1e-06) == '3.1e-6', scientific(1e-4, 0) == '1e-4': as a person writes it."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def bytes_text(n):
    """Bytes as a person reads them, to 3 significant digits: '6.23 GB', '498 MB', '10.7 kB'."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def wrap(text):
    """text as the README's lines of at most 116 characters; a bullet's next lines indented under its text.

    A code span (`...`) is never split, so no line can start with a "+ " or "- " from inside one (markdown
    would read it as a list): wrap('`"!" + c`') keeps '`"!" + c`' whole.
    """
    indent = "  " if text.startswith("- ") else ""
    whole = re.sub(r"`[^`]*`", lambda code: code.group(0).replace(" ", "\0"), text)  # NUL: a space not to break at
    return textwrap.fill(whole, width=116, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False).replace("\0", " ")
