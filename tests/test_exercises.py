"""EXERCISES.md, the kit's steps (exercises.STEPS) and the tests' step markers agree; the page keeps its promises.

Read EXERCISES.md and course/exercises.py first. A step's "**Passing** means N passed" is the number of checks its
marker selects (`python -m pytest -m stepN`, counted by pytest's own collection in one subprocess), and those
checks live in the test files the step names, so `python classroom.py grade N` (which runs only those files)
runs all of them. The tests also hold EXERCISES.md to what a learner needs: every step says what to read
first and how long it takes, open-ended steps have a rubric, hints are not on the page, the known mistakes
wait behind an "If a test fails" line, every command works in PowerShell as in bash, the files, functions,
tests and README sections it names exist, a check that never ends stops the run, and no issue numbers.
"""

import ast
import configparser
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import classroom
from course import exercises
from conftest import REPO_ROOT

EXERCISES = (REPO_ROOT / "EXERCISES.md").read_text(encoding="utf-8")

COLLECT = textwrap.dedent('''
    import contextlib, io, json
    import pytest

    class Recorder:
        steps, names = {}, []
        def pytest_collection_finish(self, session):
            for item in session.items:
                self.names.append(item.originalname)
                for mark in item.iter_markers():
                    if mark.name.startswith("step"):
                        self.steps.setdefault(mark.name, []).append(item.nodeid)

    recorder = Recorder()
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[recorder])
    print(json.dumps({"steps": recorder.steps, "names": recorder.names}))
''')


def sections():
    """{step number: (its heading line, its section of EXERCISES.md up to the next heading of that level)}."""
    parts = re.split(r"^(## Step (\d+)\b.*)$", EXERCISES, flags=re.M)
    return {int(number): (heading, text.split("\n## ", 1)[0])
            for heading, number, text in zip(parts[1::3], parts[2::3], parts[3::3])}


@pytest.fixture(scope="module")
def collected():
    """{"steps": {"stepN": [node ids of the tests carrying that marker]}, "names": [every test function's name]},
    over the whole suite, as `python -m pytest --collect-only` finds it (one collection for the tests below)."""
    run = subprocess.run([sys.executable, "-c", COLLECT], capture_output=True, text=True, cwd=REPO_ROOT,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def marked(collected):
    """{"stepN": [node ids of the tests carrying that marker]}, over the whole suite."""
    return collected["steps"]


def test_the_page_has_a_section_per_step_of_the_kit_in_order_with_its_title_and_time():
    """The headings keep the anchors other pages link to, so the time stands on the line below (the kit spells
    alpha out: `classroom.py list` must print on a console that has no α)."""
    assert sorted(sections()) == [s.number for s in exercises.STEPS]
    for number, (heading, section) in sections().items():
        step = exercises.step(number)
        assert step.title.lower().replace("alpha", "α") in heading.lower(), heading
        time = f"about {step.minutes} minutes" if step.minutes < 120 else f"about {step.minutes // 60} hours"
        assert section.lstrip().startswith(f"**Time:** {time}."), heading


def test_the_table_gives_each_steps_file_functions_command_and_time():
    for step in exercises.STEPS:
        row = re.search(rf"^\| {step.number} \|.*$", EXERCISES, flags=re.M)
        assert row, f"the table has no row for step {step.number}"
        cells = [cell.strip() for cell in row.group(0).strip("|").split("|")]
        assert cells[1] == step.title
        by_file = {}
        for file, name in exercises.places(step):
            by_file.setdefault(file, []).append(name)
        for file, names in by_file.items():
            assert f"`{file}: {', '.join(names)}`" in cells[2]
        assert ("`python classroom.py grade %d`" % step.number in cells[3]) == bool(step.tests)
        assert cells[4] == (f"{step.minutes} min" if step.minutes < 120 else f"{step.minutes // 60} hours")


def test_every_graded_step_has_its_grading_command_and_the_open_one_has_none():
    for number, (_, section) in sections().items():
        commands = re.findall(r"^python classroom.py grade (\d+)$", section, flags=re.M)
        assert commands == ([str(number)] if number in exercises.GRADED else []), number
    assert exercises.GRADED == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13)


@pytest.mark.parametrize("step", exercises.GRADED)
def test_passing_means_the_number_of_checks_the_steps_marker_selects(step, marked):
    counts = re.findall(r"\*\*Passing\*\* means (\d+) passed", sections()[step][1])
    assert counts == [str(len(marked[f"step{step}"]))], f"step {step}: the marker selects {len(marked[f'step{step}'])}"


def test_a_steps_checks_live_in_the_test_files_the_kit_runs_for_it(marked):
    """`classroom.py grade N` runs the step's files only (fast); `pytest -m stepN` the whole suite: the same checks."""
    assert sorted(marked) == sorted(f"step{n}" for n in exercises.GRADED)
    for step in exercises.GRADED:
        files = {node.split("::")[0] for node in marked[f"step{step}"]}
        assert files == set(exercises.step(step).tests), step


def test_pytest_ini_registers_one_marker_per_graded_step():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "pytest.ini", encoding="utf-8")
    names = [line.split(":")[0].strip() for line in config["pytest"]["markers"].strip().splitlines()]
    assert names == [f"step{n}" for n in exercises.GRADED]


def test_the_chain_check_of_step_9_runs_alone_with_k_chain(marked):
    chain = [node for node in marked["step9"] if "chain" in node]
    assert len(chain) == 1 and "tree" not in chain[0]


def test_every_step_says_what_to_read_first_and_the_open_ones_have_a_rubric():
    for number, (_, section) in sections().items():
        assert "**Read first:**" in section, f"step {number}"
        assert ("**Rubric" in section) == (number in (11, 12)), f"step {number}"


def test_hints_are_not_on_the_page_and_known_mistakes_wait_behind_an_if_a_test_fails_line():
    """The hints come from `python classroom.py hint N`; every `<details>` block (closed until clicked) says
    when to open it, and no list of mistakes stands outside one."""
    summaries = re.findall(r"<details><summary>(.*?)</summary>", EXERCISES)
    assert summaries and all(s == "If a test fails: the mistakes the tests catch" for s in summaries), summaries
    assert "**Hint" not in EXERCISES and "If you are stuck" not in EXERCISES
    outside = re.sub(r"<details>.*?</details>", "", EXERCISES, flags=re.S)
    assert "mistakes the tests catch" not in outside
    for number in exercises.GRADED:
        assert f"`python classroom.py hint {number}`" in sections()[number][1], number



def test_every_step_whose_hints_say_run_it_again_has_a_next_hint():
    """"run it again for the next one" promises a second hint: every step the page says it of has two or more
    (steps 7 and 8 had one, and `hint 7 --level 2`, classroom.py --help's example, was refused)."""
    promised = [number for number, (_, section) in sections().items() if "run it again for the next one" in section]
    assert promised and set(promised) <= set(exercises.GRADED)
    assert {number: len(classroom.hints(number)) for number in promised if len(classroom.hints(number)) < 2} == {}
    examples = re.findall(r"classroom\.py hint (\d+) --level (\d+)", classroom.__doc__)  # --help's examples
    assert examples and all(int(level) <= len(classroom.hints(int(number))) for number, level in examples), examples

def commands(text):
    """Every command a reader may paste: the lines of code blocks and the inline code that starts with a tool."""
    blocks = re.findall(r"^```\w*\n(.*?)^```", text, flags=re.S | re.M)
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    inline = re.findall(r"`((?:python|pip|git) [^`]+)`", text)
    return lines + inline


def test_every_command_works_in_powershell_too():
    """No `&&` (PowerShell 5 has none), no `VAR=value command` prefix, no `export`, no `$VAR`, no bash-only
    syntax (a line continued by a backslash, /dev/null), and a comma list quoted (PowerShell passes `1,2,4`
    unquoted as three arguments)."""
    found = commands(EXERCISES)
    assert len(found) > 20
    for command in found:
        assert "&&" not in command and not re.match(r"^[A-Z_]+=\S* ", command), command
        assert not command.startswith("export ") and not re.search(r"\$[A-Z_{(]", command), command
        assert "\\\n" not in command and not re.search(r"[<>] ?/dev/", command), command
        assert not re.search(r"\s--?\w+ [\w.]+,[\w.]", command), f"quote a comma list (PowerShell splits it): {command}"


def test_a_test_that_never_ends_stops_the_whole_run(tmp_path):
    """conftest.py's hook: the first test past its limit fails and the run ends there, so a `_verify` that never
    ends costs one time limit, not one per test. Two tests that would sleep for minutes, a limit of 1 second:
    one fails, the other never starts, and pytest says why."""
    (tmp_path / "test_forever.py").write_text("import time\n\ndef test_a():\n    time.sleep(600)\n\n"
                                              "def test_b():\n    time.sleep(600)\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                          "--timeout=1", "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests")},
                         timeout=120)
    assert "1 failed" in run.stdout and "test_b" not in run.stdout, run.stdout
    assert "ran past its time limit, so the run stops here" in run.stdout


def test_the_kit_grades_with_a_time_limit_per_check():
    assert exercises.PER_TEST_TIMEOUT in exercises.pytest_command(7, "report.xml")


def test_every_test_exercises_names_exists(collected):
    names = set(collected["names"])
    named = set(re.findall(r"`(test_\w+)`", EXERCISES))
    assert names and named <= names, sorted(named - names)


def test_every_file_exercises_names_exists():
    paths = set(re.findall(r"`((?:[\w-]+/)*[\w-]+\.(?:py|md|txt|ini))\b", EXERCISES))
    missing = [path for path in sorted(paths) if not (REPO_ROOT / path).is_file()]
    assert paths and missing == []


def defined_names(path):
    """Functions, classes and their methods (as Class.method) defined at the top level of a file."""
    names = set()
    for node in ast.parse((REPO_ROOT / path).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(f"{node.name}.{item.name}" for item in node.body if isinstance(item, ast.FunctionDef))
    return names


def test_every_function_the_kit_names_is_in_the_file_it_names():
    for step in exercises.STEPS:
        for file, name in exercises.places(step):
            assert name in defined_names(file), f"{file} defines no {name}"


def test_every_section_of_the_readme_or_benchmarks_exercises_names_is_there():
    """EXERCISES.md names parts like the README's "How a round works, with numbers" or docs/BENCHMARKS.md's "Small
    timings": a heading, or a paragraph that opens with its name in bold."""
    named = re.findall(r'(README|BENCHMARKS)(?:\.md)?(?:\'s)? "([^"]+)"', EXERCISES)
    assert named
    pages = {"README": "README.md", "BENCHMARKS": "docs/BENCHMARKS.md"}
    for page, name in set(named):
        text = (REPO_ROOT / pages[page]).read_text(encoding="utf-8")
        assert re.search(rf"^#+ {re.escape(name)}\s*$|^\*\*{re.escape(name)}\.?\*\*", text, flags=re.M), name


def test_every_function_named_as_in_a_file_is_defined_there():
    """Phrases like "`brute_force_lookup` in `tools/full_scan_lookup.py`": code moves, and the phrase must follow."""
    named = re.findall(r"`([\w.]+)` in `((?:\w+/)*\w+\.py)`", EXERCISES)
    assert named
    for name, path in named:
        assert name in defined_names(path), f"{path} defines no {name}"


def test_exercises_cite_no_issue_numbers():
    assert not re.search(r"#\d|\bissues? \d", EXERCISES, flags=re.I)
