"""The house a learner opens: the model's files at the top, the machinery in named folders, prose that cannot go stale.

Read the README's "The files, in reading order" first: these tests hold the repository to it.
- `ls` at the root is the learner's path and fits one screen; the machinery lives in folders named for what they
  hold (speed/, loaders/, command_line/, course/, tools/, docs/, requirements/).
- No Python file is over about 600 lines. A module docstring says what and why in about 40 lines; only
  sampling.py's is longer, because it holds Chen et al.'s Algorithm 2 and the proof that the output is exactly
  the target's distribution.
- A measured figure (milliseconds, bandwidths, ratios such as 1.8x, r(m) values) goes stale the day the code or
  the machine changes, so it lives only in a block that the figures command regenerates (`<!-- NAME: begin ...
  -->` ... `<!-- NAME: end -->` in README.md and docs/BENCHMARKS.md), never in a .py file or in a page's prose.
  What looks like one but is not (a goal, a worked sum, the format a function prints) is listed below with why.
- Every `python SCRIPT.py --flag ...` and `pip install -r FILE` a page shows names a file that exists and flags
  that script takes.
"""

import ast
import re
import subprocess

import pytest
from conftest import REPO_ROOT

LEARNERS_PATH = ("main.py", "gpt2.py", "encoder.py", "utils.py", "sampling.py", "tests", "img", "README.md",
                 "requirements.txt")  # the design card's top level
MACHINERY = ("speed", "loaders", "command_line", "course", "tools", "docs", "requirements")
MAX_TOP_LEVEL = 26  # entries `ls` shows: one screen (checks.py, the entry points' guards, keeps them out of the core)
MAX_DOCSTRING_LINES = 40
MAX_FILE_LINES = 610  # "no file over about 600 lines": one idea per file, read in one sitting
PROOF_HOLDER = "sampling.py"  # Algorithm 2 and its proof, whole: splitting it would split the proof
PAGES = ("README.md", "EXERCISES.md", "docs/BENCHMARKS.md", "docs/GLOSSARY.md")


def tracked_files():
    """The repository's files as git tracks them (the working tree's, not a stale index: untracked ones count)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    return sorted(path for path in listed if path and (REPO_ROOT / path).exists())


def test_the_top_level_is_the_learners_path_and_fits_one_screen():
    entries = sorted({path.split("/")[0] for path in tracked_files() if not path.startswith(".")})
    assert len(entries) <= MAX_TOP_LEVEL, f"{len(entries)} entries at the top, more than {MAX_TOP_LEVEL}: {entries}"
    assert set(LEARNERS_PATH) <= set(entries), sorted(set(LEARNERS_PATH) - set(entries))
    assert set(MACHINERY) <= set(entries), sorted(set(MACHINERY) - set(entries))
    machinery_at_the_top = [name for name in entries if name in {"panels.py", "helper_process.py", "download.py", "hub.py",
                                                                 "cli.py", "commands.py", "gradebook.py", "benchmark.py"}]
    assert machinery_at_the_top == [], "machinery belongs in its folder"



def test_every_machinery_folders_index_names_each_of_its_files():
    """A folder's __init__.py is its table of contents ("machinery to take on trust"): each file it holds is named
    there with what it is for, so a learner who opens the folder finds every file's line (five files had none)."""
    unnamed = {}
    for folder in ("speed", "loaders", "command_line", "course", "tools"):
        index = ast.get_docstring(ast.parse((REPO_ROOT / folder / "__init__.py").read_text(encoding="utf-8")))
        files = {path.split("/")[1] for path in tracked_files()
                 if path.startswith(folder + "/") and path.count("/") == 1} - {"__init__.py"}
        unnamed[folder] = sorted(name for name in files if not re.search(rf"\b{re.escape(name)}\b", index))
    assert {folder: names for folder, names in unnamed.items() if names} == {}

def test_no_python_file_is_over_about_600_lines():
    """One idea per file: a file past about 600 lines holds two, and the second gets a file (and a name) of its own.
    Tests too: a learner reads them as the specification."""
    lines = {path: len((REPO_ROOT / path).read_text(encoding="utf-8").splitlines()) for path in tracked_files()
             if path.endswith(".py")}
    assert {path: n for path, n in lines.items() if n > MAX_FILE_LINES} == {}


def module_docstring_lines(path):
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    return len(docstring.splitlines()) if docstring else 0


def test_every_module_docstring_is_about_40_lines_but_the_one_that_holds_the_proof():
    """What and why, a worked example, where it is measured: the rest belongs to the functions' own docstrings."""
    long = {path: module_docstring_lines(REPO_ROOT / path) for path in tracked_files()
            if path.endswith(".py") and not path.startswith("tests/") and path != PROOF_HOLDER}
    assert {path: n for path, n in long.items() if n > MAX_DOCSTRING_LINES} == {}


# A measured figure: a time or a rate with its unit, a ratio written as 1.8x or 1.8×, an r(m) with its value.
FIGURE = re.compile(r"""
    \b\d+(?:[.,]\d+)?\ ?(?:ms|µs|us|ns|GB/s|MB/s|GiB/s|tokens/s)\b    # 21.5 ms, 30 GB/s
  | (?<![\w:{.])\d+(?:\.\d+)?(?:[-–]\d+(?:\.\d+)?)?[x×](?![\w{}])       # 1.8x, 2-3x, 1.29× (not 0x1F, {:02x})
  | \b\d+\.\d+\ ?s\b                                                  # 0.3 s
  | \br\(\d+\)\ ?(?:=|is|of|:)?\ ?\d\.\d+                              # r(2) = 1.85
""", re.VERBOSE)
GENERATED_BLOCK = re.compile(r"<!-- ([\w-]+): begin.*?<!-- \1: end -->", re.DOTALL)

# Figures that are not measurements: (file, a piece of the line, why). Keep it short.
NOT_MEASURED = [
    ("lookahead.py", "3.3616 / 2.6 = 1.29x", "a worked sum of the cost model"),
    ("lookahead.py", "with r(2) = 1.07, say,", "a supposed r(2) of AutoK's worked example"),
    ("lookahead.py", "r(17) = 2.05, say)", "a supposed r(17) of the same example"),
    ("EXERCISES.md", "3.3616 / (0.4·4 + 1) = 1.29×", "the same worked sum"),
    ("README.md", "makes the prediction 1×", "the definition of break-even"),
    ("docs/BENCHMARKS.md", "within 1.2× of the strict floor", "a goal"),
    ("docs/BENCHMARKS.md", "at most 1.15× the weights", "a goal"),
    ("tools/measured_parts.py", "at most 1.2x the strict floor", "a goal"),
    ("tools/measured_parts.py", "at most 1.15x the step at 16", "a goal"),
    ("tools/measured_parts.py", "at most 1.15x the weights", "a goal"),
    ("tools/measured_parts.py", "at most 2x the time", "a goal"),
    ("tools/pages.py", "'1.42–2.20×': the span", "the format a function prints"),
    ("tools/pages.py", "'1.4 µs' under a millisecond", "the format a function prints"),
    ("tools/benchmark_text.py", "'1.83x (1.79-1.90)'", "the format a function prints"),
    ("tools/benchmark_text.py", '"1.00x", "1.00x"', "the autoregressive row is 1.00x by definition"),
    ("tools/benchmark_text.py", "(a 1-position target pass 11.2-13.9 ms); '", "the format a function prints"),
    ("speed/calibration.py", "(a 1-position target pass: 31.2 ms)'", "the format a function prints"),
]
# Measured facts a file may state, each with the date and the machine it was measured on. Keep it shorter still.
DATED_FACTS = [
    ("speed/openblas_env.py", "the 10 steps took 304 ms unset and 236 ms at 20", "2026-11-26, Intel Xeon, NumPy 2.5.5: "
     "a setting of OpenBLAS's own, measured once in fresh processes"),
]


def measured_figures(text, page):
    """[(line number, figure, the line)] of the figures in `text`; in a page, those outside generated blocks."""
    if page:
        text = GENERATED_BLOCK.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [(number, match.group(0), line) for match in FIGURE.finditer(line)]
    return found


def allowed(path, line):
    return any(path == where and piece in line for where, piece, _ in NOT_MEASURED + DATED_FACTS)


def test_no_file_states_a_measured_figure_outside_a_generated_block():
    stale = [f"{path}:{number}: {figure!r} in {line.strip()[:100]!r}"
             for path in tracked_files() if path.endswith(".py") and not path.startswith("tests/") or path in PAGES
             for number, figure, line in measured_figures((REPO_ROOT / path).read_text(encoding="utf-8"),
                                                          path.endswith(".md"))
             if not allowed(path, line)]
    assert stale == [], ("measured figures outside the figures command's blocks (put them in one, point to it, "
                         "or list a figure that is not a measurement in NOT_MEASURED):\n" + "\n".join(stale))


def test_every_allowed_figure_is_still_there():
    """An entry whose line is gone would let the next figure on a line like it through."""
    gone = [(path, piece) for path, piece, _ in NOT_MEASURED + DATED_FACTS
            if piece not in (REPO_ROOT / path).read_text(encoding="utf-8")]
    assert gone == []


@pytest.mark.parametrize("text, page, figures", [
    ("a pass took 21.5 ms, r(8) = 1.61", False, ["21.5 ms", "r(8) = 1.61"]),
    ("two rows cost 1.7x one, a pass 2-3x, 1.29× here, 0.3 s", False, ["1.7x", "2-3x", "1.29×", "0.3 s"]),
    ("<!-- t: begin (cmd) -->\n| 21.5 ms |\n<!-- t: end -->\nbut 22 ms here", True, ["22 ms"]),
    ("<!-- t: begin (cmd) -->\n| 21.5 ms |\n<!-- t: end -->", False, ["21.5 ms"]),
    ('f"0x{code:02x}", 12 layers × 2 × 512, 0.5 x (1 + tanh)', False, []),
])
def test_the_figure_check_finds_figures_outside_blocks_and_passes_what_is_no_figure(text, page, figures):
    assert [figure for _, figure, _ in measured_figures(text, page)] == figures


COMMAND = re.compile(r"python3? ((?:[\w-]+/)*[\w-]+\.py)((?: +[^`\n|;&]*)?)")
REQUIREMENTS = re.compile(r"(?:pip3? install|python -m pip install)[^`\n]*")


def commands_in_pages():
    """[(page, script, its arguments)] of every `python SCRIPT.py ...` the pages show, in code spans and blocks."""
    found = []
    for page in PAGES:
        for code in re.findall(r"```.*?```|`[^`\n]+`", (REPO_ROOT / page).read_text(encoding="utf-8"), re.DOTALL):
            found += [(page, script, arguments) for script, arguments in COMMAND.findall(code)]
    return found


def flags_a_script_takes(path):
    """Every flag name the script could take: its functions' parameters (fire's flags), the strings "--name" it
    hands argparse, and fire's --noNAME for each."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {arg.arg for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.Lambda))
             for arg in node.args.args + node.args.kwonlyargs}
    names |= {node.value[2:] for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--")}
    return names | {"no" + name for name in names} | {"help"}


def test_every_command_a_page_shows_runs_a_script_that_exists_with_flags_it_takes():
    commands = commands_in_pages()
    assert len(commands) > 20, "the pages show commands: the scan must find them"
    wrong = []
    for page, script, arguments in commands:
        if not (REPO_ROOT / script).is_file():
            wrong.append(f"{page}: python {script}: no such file")
            continue
        unknown = set(re.findall(r"(?:^|\s)--(\w+)", arguments)) - flags_a_script_takes(REPO_ROOT / script)
        if unknown:
            wrong.append(f"{page}: python {script}{arguments}: {script} takes no --{', --'.join(sorted(unknown))}")
    assert wrong == [], "\n".join(wrong)


def test_every_requirements_file_a_page_installs_exists():
    named = [(page, name) for page in PAGES for command in REQUIREMENTS.findall((REPO_ROOT / page).read_text("utf-8"))
             for name in re.findall(r"-[rc] (\S+)", command)]
    assert named, "the README's set-up installs requirements.txt"
    assert [(page, name) for page, name in named if not (REPO_ROOT / name).is_file()] == []


def test_the_command_check_catches_a_missing_script_and_an_unknown_flag(tmp_path):
    script = tmp_path / "tool.py"
    script.write_text("def main(sizes='124M', *, repeats=3):\n    pass\n")
    assert {"sizes", "repeats", "nosizes", "help"} <= flags_a_script_takes(script)
    assert "sizez" not in flags_a_script_takes(script)
    assert COMMAND.findall("python tools/x.py --sizes 124M --repeats 2") == [("tools/x.py", " --sizes 124M --repeats 2")]
