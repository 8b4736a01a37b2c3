"""The pages' generated blocks, as the tests read them: README.md, docs/BENCHMARKS.md and EXERCISES.md, the block between
a part's marks, and a markdown table's cells (a helper of tests/test_readme.py and tests/test_measured_tables.py).

Read tools/pages.py first: it writes the blocks between `<!-- name: begin (command) -->` and `<!-- name: end -->`.
"""

import re
import textwrap

from conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
BENCHMARKS = (REPO_ROOT / "docs/BENCHMARKS.md").read_text(encoding="utf-8")
EXERCISES = (REPO_ROOT / "EXERCISES.md").read_text(encoding="utf-8")
PAGES = {"README.md": README, "docs/BENCHMARKS.md": BENCHMARKS}  # the pages with generated blocks
ONE_COMMAND = "python tools/make_readme_figures.py --random_weights"


def generated_block(text, name=None):
    """The text between `<!-- name: begin ... -->` and `<!-- name: end -->`, without a ```text fence, and without
    the indentation of a part inside a list item. generated_block(name) looks in the README, then docs/BENCHMARKS.md."""
    if name is None:
        text, name = next((page for page in PAGES.values() if f"<!-- {text}: begin" in page), README), text
    match = re.search(rf"<!-- {name}: begin[^>]*-->\n(.*?)<!-- {name}: end -->", text, re.S)
    assert match, f"no page has a block marked {name}"
    return re.sub(r"^```\w*\n|```\n?$", "", textwrap.dedent(match.group(1)).strip() + "\n", flags=re.M).strip()


def markdown_rows(block):
    """The cells of a markdown table's rows (header first, the --- line left out)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in block.splitlines()
            if line.startswith("|")]
    return [rows[0]] + [row for row in rows[1:] if not set("".join(row)) <= set("- ")]
