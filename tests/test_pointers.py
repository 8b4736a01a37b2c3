"""Every "see X in Y" pointer in the code, the docs and the tests leads where it says.

Read tests/test_learning_path.py first (it checks the pages' links to headings; this file checks the pointers
written as words). Two forms are checked, wherever they appear (README.md, docs/BENCHMARKS.md, EXERCISES.md and
every .py file of the project):

- a name in a file: "`create_model_fn` in model_fn.py", "`PromptLookup`'s docstring in `drafters.py`",
  "gpt2.py's `rollback`": the file defines that name (a def, a class, an assignment or a parameter);
- a section of a page: 'the README's "Speed of the forward pass"', 'docs/BENCHMARKS.md, "Which Unicode"': the page
  has a heading that starts with those words.

A pointer that goes stale sends a learner to a file that does not have what they were told to read.
"""

import re

import pytest

from conftest import REPO_ROOT
from test_learning_path import project_texts

FILE = r"`?((?:tests/|tools/)?\w+\.py)`?"
NAME = r"`([A-Za-z_][\w.]*)(?:\(\))?`"
NAME_IN_FILE = [
    re.compile(NAME + r"(?:'s \w+)? (?:in|of|from) \[?" + FILE),  # `name` in file.py, `name`'s docstring in file.py
    re.compile(FILE + r"'s " + NAME),  # file.py's `name`
]
MODULE_NAME = re.compile(r"`(\w+)\.(\w+)`|\bsee (\w+)\.(\w+)\b")  # `sampling._verify_chain`, see lookahead.AutoK
FILE_EXTENSIONS = {"py", "json", "md", "txt", "bpe", "png", "index", "safetensors", "csv"}  # `gpt2.py` is a file
SECTION_OF_PAGE = re.compile(r"(README|(?:docs/)?BENCHMARKS\.md|EXERCISES\.md)(?:'s|(?<=md),) \"([^\"]+)\"")
# ^ the README's "Section", docs/BENCHMARKS.md's "Section", (docs/BENCHMARKS.md, "Section")


def find_file(path):
    """The project file a pointer names: tools/x.py, tests/x.py or x.py, looked for at the top, then in the
    folders (a docstring in tools/ says "measured_parts.py" for tools/measured_parts.py)."""
    for folder in ("", "tools/", "tests/", "speed/", "loaders/", "command_line/", "course/", "docs/"):
        if (REPO_ROOT / folder / path).is_file():
            return REPO_ROOT / folder / path
    return None


def defines(source, name):
    """Whether Python source defines `name` (its last part: `lookahead.AutoK` -> AutoK): as a def or class, an
    assignment or annotated field, or a parameter of a def."""
    name = re.escape(name.split(".")[-1])
    return bool(re.search(rf"^\s*(?:def|class)\s+{name}\b|^\s*{name}\s*(?::[^=\n]*)?=|^\s*{name}\s*:"
                          rf"|^\s*def \w+\([^)]*\b{name}\b", source, re.M))


def headings(page_text):
    """The page's headings, and the run-in headings that open a paragraph: "**Tokens per round.** If ..."."""
    return [line.lstrip("#").strip() for line in page_text.splitlines() if line.startswith("#")] + re.findall(
        r"^\*\*([^*]+?)\.?\*\*", page_text, re.M)


def stale_pointers(texts):
    """["where: pointer (why)"] of the pointers in {path: text} that do not lead where they say."""
    pages = {"README": "README.md", "docs/BENCHMARKS.md": "docs/BENCHMARKS.md", "BENCHMARKS.md": "docs/BENCHMARKS.md",
             "EXERCISES.md": "EXERCISES.md"}
    stale = []
    for where, text in texts.items():
        for pattern in NAME_IN_FILE:
            for match in pattern.finditer(text):
                name, path = match.groups() if pattern is NAME_IN_FILE[0] else match.groups()[::-1]
                line = text[: match.start()].count("\n") + 1
                found = find_file(path)
                if found is None:
                    stale.append(f"{where}:{line}: {match.group(0)!r} (no file {path})")
                elif not defines(found.read_text(encoding="utf-8"), name):
                    stale.append(f"{where}:{line}: {match.group(0)!r} ({path} defines no {name})")
        for match in MODULE_NAME.finditer(text):
            module, name = (group for group in match.groups() if group)
            found = find_file(f"{module}.py")
            if name not in FILE_EXTENSIONS and found and not defines(found.read_text(encoding="utf-8"), name):
                line = text[: match.start()].count("\n") + 1
                stale.append(f"{where}:{line}: {match.group(0)!r} ({module}.py defines no {name})")
        for match in SECTION_OF_PAGE.finditer(text):
            page, section = pages[match.group(1)], " ".join(match.group(2).split())
            if not any(heading.startswith(section) for heading in headings((REPO_ROOT / page).read_text("utf-8"))):
                line = text[: match.start()].count("\n") + 1
                stale.append(f"{where}:{line}: {match.group(0)!r} ({page} has no heading {section!r})")
    return stale


def test_every_pointer_to_a_name_in_a_file_or_a_section_of_a_page_resolves():
    texts = {str(path): text for path, text in project_texts().items() if path.name != "test_pointers.py"}
    stale = stale_pointers(texts)  # (this file's own examples are meant to be stale)
    assert not stale, "stale pointers:\n" + "\n".join(stale)


@pytest.mark.parametrize("pointer", [
    "`create_model_fn` in sampling.py",  # it lives in model_fn.py
    "sampling.py's `logits_to_probs`",
    "`Staged` in nowhere.py",
    'the README\'s "Loading weights"',  # a section of docs/BENCHMARKS.md
    "see sampling.create_model_fn",
])
def test_the_pointer_check_catches_a_stale_pointer(pointer):
    assert stale_pointers({"example": pointer})


@pytest.mark.parametrize("pointer", [
    "`create_model_fn` in model_fn.py", "gpt2.py's `rollback`", "`PromptLookup`'s docstring in `drafters.py`",
    'docs/BENCHMARKS.md\'s "Speed of the forward pass"', "`Round` in records.py",
    "`sampling._verify_chain`", 'the README\'s "Tokens per round"', "(docs/BENCHMARKS.md, \"Which Unicode\")",
])
def test_the_pointer_check_passes_a_pointer_that_resolves(pointer):
    assert stale_pointers({"example": pointer}) == []
