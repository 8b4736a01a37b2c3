"""The README as a learning path: short, in order, every term defined before it is used, no answer given away.

Read README.md first, then tests/page_blocks.py (how the pages' generated blocks are read) and
tests/test_readme.py (their line links).
"""

import re

import pytest
from conftest import REPO_ROOT
from page_blocks import BENCHMARKS, EXERCISES, README, generated_block, markdown_rows
from test_readme import line_links

README_MAX_LINES = 475  # "at most about 450": the learning path (and a teacher's guide); measured tables go to docs/BENCHMARKS.md


def test_the_readme_stays_a_short_learning_path():
    assert len(README.splitlines()) <= README_MAX_LINES, (
        f"README.md has {len(README.splitlines())} lines: move detail to docs/BENCHMARKS.md or a docstring")


def project_texts():
    """{path: text} of the pages and every .py file of the project (top level, tools/, tests/)."""
    paths = [REPO_ROOT / name for name in ("README.md", "docs/BENCHMARKS.md", "EXERCISES.md", "docs/GLOSSARY.md")]
    paths += sorted(path for folder in ("", "tools", "tests") for path in (REPO_ROOT / folder).glob("*.py"))
    return {path.relative_to(REPO_ROOT): path.read_text(encoding="utf-8") for path in paths}


ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? #?\d+")


def test_no_page_and_no_source_file_cites_an_issue_number():
    """A reader cannot see the project's issue tracker: "the target of issue eleven" says nothing to them."""
    cited = [f"{path}:{text[: match.start()].count(chr(10)) + 1}: {match.group(0)!r}"
             for path, text in project_texts().items() for match in ISSUE_NUMBER.finditer(text)]
    assert not cited, "issue numbers: " + "; ".join(cited)


def test_the_issue_number_check_has_teeth():
    cited = "as Is" + "sue 11's target says"  # spelled in two parts, so that this file cites no issue itself
    assert ISSUE_NUMBER.search(cited) and not ISSUE_NUMBER.search("the tissue 3 cm")


def letter(name):
    """A regex for a one-letter term used as a word: p in "q / p", not in "top-p", `p_row` or "p(x" (a formula)."""
    return rf"(?<![\w`/.#-]){name}(?![\w`(/-])"


TERMS = {  # term: (its first use must be at or after this definition, a regex for a use)
    "α": ("so α, the acceptance rate", r"α"),
    "p": ("**p**", letter("p")),
    "q": ("**q**", letter("q")),
    "u": ("**u**", letter("u")),
    "Step 3": ("- **Step 3:**", r"Steps? 3"),
    "Step 4": ("- **Step 4:**", r"Steps? (?:3–)?4"),
    "residual": ("**residual (q − p)₊**", r"residual"),
    "bonus token": ("**bonus token**", r"bonus token"),
    "SpecInfer's rule": ("**SpecInfer's rule**", r"SpecInfer"),
    "r(m)": ("**r(m)**", r"\br\(m\)"),
    "c": ("**c**", letter("c")),
    "β": ("**β**", r"β"),
    "the floor": ("**the floor**", r"\bthe floor\b"),
    "target": ("the big model (the **target**)", r"\btarget\b"),
    "draft": ("a small **draft** model", r"\bdraft\b"),
    "drafter": ("a **drafter** is", r"\bdrafter"),
    "BPE": ("the **BPE** (byte-pair encoding", r"\bBPE\b"),
    "tiktoken": ("**tiktoken** (OpenAI's", r"\btiktoken\b"),
    "K": ("**K** is the number of guesses per round", letter("K")),
    "top-k and top-p": ("**top-k** and **top-p**", r"\btop-[kp]\b"),
    "picoGPT": ("(**picoGPT**'s way:", r"picoGPT"),
    "total variation": ("**total variation**", r"total.variation"),
    "McDiarmid": ("**McDiarmid's inequality**", r"McDiarmid"),
    "suffix automaton": ("**suffix automaton**", r"suffix automaton"),
    "OpenBLAS": ("**OpenBLAS**", r"OpenBLAS"),
}


def prose(text):
    """text without its code blocks, generated blocks, inline code, link targets and image lines: what a
    reader reads as words (a letter inside `code` or a URL is not a use of a term)."""
    text = re.sub(r"<!-- ([\w-]+): begin.*?<!-- \1: end -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"^!\[.*$", "", text, flags=re.M)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"`[^`]*`", "", text)


@pytest.mark.parametrize("term", sorted(TERMS))
def test_every_term_is_defined_before_its_first_use_or_links_to_its_definition(term):
    definition, pattern = TERMS[term]
    text = prose(README)
    assert definition in text, f"the README no longer defines {term} with {definition!r}"
    defined_at = text.index(definition)
    for match in re.finditer(pattern, text[:defined_at]):
        line = text[text.rfind("\n", 0, match.start()) + 1 : text.find("\n", match.start())]
        assert links_to_a_definition(line), f"{term!r} is used before it is defined: {line.strip()!r}"


DEFINING_SECTIONS = ("(docs/GLOSSARY.md)", "(#how-a-round-works-with-numbers)", "(#drafters-and-trees)",
                     "(#when-does-it-pay-off-on-a-cpu)")


def links_to_a_definition(line):
    """Whether a README line (as prose() leaves it) links, in the README itself, to the glossary or to a section
    that defines the terms it uses."""
    original = next((raw for raw in README.splitlines() if prose(raw).strip() == line.strip()), "")
    return any(anchor in original for anchor in DEFINING_SECTIONS)


def test_the_term_check_has_teeth():
    """A use of "bonus token" above its definition, with no link, is caught."""
    definition, pattern = TERMS["bonus token"]
    text = "a round ends with the bonus token.\n" + definition
    assert re.search(pattern, text[: text.index(definition)])


def github_anchor(heading):
    """The anchor GitHub gives a heading: '## Step 9: verifying a round (hard)' -> 'step-9-verifying-a-round-hard'."""
    return re.sub(r"[^\w\- ]", "", heading.strip("# ").lower()).replace(" ", "-")


def test_links_into_the_pages_land_on_a_heading():
    """[...](EXERCISES.md#step-7-...) and [...](#how-a-round-works-with-numbers) must name a heading there."""
    pages = {"README.md": README, "docs/BENCHMARKS.md": BENCHMARKS, "EXERCISES.md": EXERCISES}
    anchors = {name: {github_anchor(line) for line in text.splitlines() if line.startswith("#")}
               for name, text in pages.items()}
    for source in ("README.md", "docs/BENCHMARKS.md"):
        for target, anchor in re.findall(r"\]\(((?:README|BENCHMARKS|EXERCISES)\.md)?#([^)]+)\)", pages[source]):
            page = target or source
            assert anchor in anchors[page], f"{source} links to {page}#{anchor}: no such heading"


def exercise_functions():
    """{(file, name)} of the functions EXERCISES.md's table asks a learner to write ("`sampling.py: _accept`",
    "`drafters.py: PromptLookup.index, PromptLookup.lookup`")."""
    found = set()
    for path, names in re.findall(r"`(\w+\.py): ([\w., ]+)`", EXERCISES):
        found.update((path, name.strip().split(".")[-1]) for name in names.split(","))
    return found


def links_below_an_answer(links, answers):
    """[(link, the exercise function it lands in or below)] of line links [(name, path, line)], given the
    exercise functions {(path, name)}."""
    import ast

    found = []
    for name, path, line in links:
        tree = ast.parse((REPO_ROOT / path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and (path, node.name) in answers \
                    and node.lineno <= line:
                found.append((f"[`{name}`]({path}#L{line})", node.name))
    return found


def test_no_readme_link_lands_inside_or_below_an_exercises_answer():
    """The README comes first: a line link into `_verify_chain`'s body shows Step 9's answer before the step. And a
    learner's answer is as long as it is: a link below an answer in the same file would move with it, so a
    correct solution would fail the line-link check. Every line link lands above every function EXERCISES.md
    asks the learner to write in its file; code further down is named with its file (`AutoK` in lookahead.py)."""
    answers = exercise_functions()
    assert {("sampling.py", "_verify_chain"), ("drafters.py", "_verify_tree")} <= answers, \
        "EXERCISES.md's table no longer names the verifiers' files"
    found = links_below_an_answer(line_links(README) + line_links(BENCHMARKS), answers)
    assert not found, "; ".join(f"{link} lands in or below {name}, an answer in EXERCISES.md: name its file, "
                                f"or link the step" for link, name in found)


def test_the_link_below_an_answer_check_has_teeth():
    """A link to `_sample`, below `_accept` in sampling.py, is caught; one to `as_drafter`, above it, is not."""
    answers = {("sampling.py", "_accept")}
    sample, as_drafter = (next(i for i, line in enumerate(SAMPLING_LINES, 1) if line.startswith(f"def {name}("))
                          for name in ("_sample", "as_drafter"))
    assert links_below_an_answer([("def _sample", "sampling.py", sample)], answers) == [
        (f"[`def _sample`](sampling.py#L{sample})", "_accept")]
    assert links_below_an_answer([("def as_drafter", "sampling.py", as_drafter)], answers) == []


SAMPLING_LINES = (REPO_ROOT / "sampling.py").read_text(encoding="utf-8").splitlines()


def test_the_trace_excerpts_p_and_q_are_the_range_the_text_gives():
    """The sentence under the trace quotes the smallest and largest p and q of the excerpt, as printed."""
    excerpt = README.split("<!-- trace-excerpt: begin -->", 1)[1].split("<!-- trace-excerpt: end -->", 1)[0]
    values = [value for value in re.findall(r"\b[pq]=([\d.e+-]+)", excerpt)]
    low, high = min(values, key=float), max(values, key=float)
    assert f"in this excerpt they run from {low} to {high}" in " ".join(README.split())


def test_r_of_m_is_about_1_at_2_and_grows_far_more_slowly_than_m():
    """What the README says of r(m), against every row of docs/BENCHMARKS.md's r table (the figures run's machine):
    r(2) is near 1 (within a fifth of it), and from m = 8 on r(m) / r(2) is less than half of m / 2 (rows cost far
    less than in proportion). The README adds that an AVX2 machine's r(2) is higher, as its kinds table shows."""
    assert ("is near 1 at m = 2 (more on AVX2 machines: the table below) and then grows far more slowly than m"
            in " ".join(README.split()))
    header, *rows = markdown_rows(generated_block("r-table"))
    ms = [int(m) for m in header[1:]]
    for row in rows:
        r = dict(zip(ms, map(float, row[1:])))
        assert all(r[m] / r[2] < (m / 2) / 2 for m in ms if m >= 8), row[0]
        assert abs(r[2] - 1) <= 0.2, row[0]


def requirement_names(path):
    """The package names a requirements file lists, following `-r other.txt`: ['numpy', 'requests', ...]."""
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            names += requirement_names(path.parent / line[3:].strip())
        elif line:
            names.append(re.split(r"[<>=!~ \[]", line, maxsplit=1)[0])
    return names


def test_the_test_section_names_every_package_the_suite_needs():
    """What `pip install -r requirements.txt -r requirements/dev.txt` installs, the README's list names."""
    section = README.split("## How it is tested", 1)[1].split("\n## ", 1)[0]
    needed = requirement_names(REPO_ROOT / "requirements.txt") + requirement_names(REPO_ROOT / "requirements/dev.txt")
    assert "huggingface_hub" in needed and "matplotlib" in needed
    for name in needed:
        assert name in section, f"the README's test section does not name {name}, which the suite needs"


def test_the_readme_counts_as_many_index_slips_as_sampling_py_lists():
    """sampling.py's docstring transcribes Algorithm 2 and lists the paper's index slips as bullets; the README
    names how many there are, in words."""
    import sampling

    listed = sampling.__doc__.split("index slips of the paper", 1)[1].split("\n\n", 1)[0]
    count = sum(line.startswith("- ") for line in listed.splitlines())
    words = {2: "Two", 3: "Three", 4: "Four"}
    assert count in words and f"{words[count]} index slips" in README, count
