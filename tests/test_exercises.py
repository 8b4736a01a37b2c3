"""EXERCISES.md says what the suite does: its counts are the suite's, its commands stop, its names exist.

Read EXERCISES.md first. A step's "**Passing** means N passed" is the number of tests its grading command runs:
each command is handed to pytest's own collection (`--collect-only`, in one subprocess, so `-k` means exactly
what it means on the command line) and counted. The tests here also hold EXERCISES.md to what a learner doing
the steps in order needs: every step says what to read first, hints and known mistakes wait behind an "If you
are stuck" / "If a test fails" line, the files, functions, tests and README sections it names exist, every
grading command stops a test that never ends, and no issue numbers.
"""

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO_ROOT

EXERCISES = (REPO_ROOT / "EXERCISES.md").read_text(encoding="utf-8")
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
TIMEOUT_FLAG = "--timeout=20"

COLLECT = textwrap.dedent('''
    import contextlib, io, json, shlex, sys
    import pytest

    class Recorder:
        ids = []
        def pytest_collection_finish(self, session):
            self.ids = [item.nodeid for item in session.items]

    collected = {}
    for command in json.load(sys.stdin):
        recorder = Recorder()
        with contextlib.redirect_stdout(io.StringIO()):
            pytest.main(shlex.split(command)[3:] + ["--collect-only", "-q", "-p", "no:cacheprovider"],
                        plugins=[recorder])
        collected[command] = recorder.ids
    print(json.dumps(collected))
''')


def steps():
    """{step number: its section of EXERCISES.md, from its "## Step N" heading to the next heading of that level}."""
    parts = re.split(r"^## Step (\d+)\b", EXERCISES, flags=re.M)
    return {int(number): text.split("\n## ", 1)[0] for number, text in zip(parts[1::2], parts[2::2])}


def grading(section):
    """[(command, N)]: each `python -m pytest ...` line of the section's code blocks, with the N of the
    "**Passing** means N passed" that follows it (the k-th command goes with the k-th count)."""
    commands = re.findall(r"^(python -m pytest .+)$", section, flags=re.M)
    counts = [int(n) for n in re.findall(r"\*\*Passing\*\* means (\d+) passed", section)]
    assert len(commands) == len(counts), f"{len(commands)} grading commands but {len(counts)} passing counts"
    return list(zip(commands, counts))


GRADED = {number: grading(section) for number, section in steps().items() if grading(section)}


@pytest.fixture(scope="module")
def collected():
    """{command: [node ids it runs]} for every grading command, and for `python -m pytest tests` (the suite)."""
    commands = [command for pairs in GRADED.values() for command, _ in pairs] + ["python -m pytest tests"]
    run = subprocess.run([sys.executable, "-c", COLLECT], input=json.dumps(commands), capture_output=True,
                         text=True, cwd=REPO_ROOT, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def test_every_graded_step_has_a_grading_command_and_the_open_one_has_none():
    assert sorted(GRADED) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13]
    assert len(GRADED[9]) == 2  # the chain, then the tree


@pytest.mark.parametrize("step", sorted(GRADED))
def test_passing_means_the_number_of_tests_the_steps_command_runs(step, collected):
    for command, count in GRADED[step]:
        assert len(collected[command]) == count, (
            f"step {step}: `{command}` runs {len(collected[command])} tests; EXERCISES.md says {count}")


def test_the_step_table_gives_each_steps_own_grading_commands():
    """The overview table's command cell holds the commands of the step's section, and nothing else."""
    for step, pairs in GRADED.items():
        row = re.search(rf"^\| {step} \|.*$", EXERCISES, flags=re.M)
        assert row, f"the table has no row for step {step}"
        in_table = re.findall(r"`(python -m pytest [^`]+)`", row.group(0))
        assert in_table == [command for command, _ in pairs], f"step {step}"


def test_every_grading_command_stops_a_test_that_runs_past_20_seconds():
    for step, pairs in GRADED.items():
        for command, _ in pairs:
            assert shlex.split(command)[-1] == TIMEOUT_FLAG, f"step {step}: `{command}`"


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


def test_the_chain_part_of_step_9_runs_no_tree_test(collected):
    """The chain comes first: a `_verify` that handles one child per node must be able to pass it."""
    chain, _ = GRADED[9][0]
    assert collected[chain] and [test for test in collected[chain] if "tree" in test.lower()] == []


def test_steps_4_and_12_share_out_the_tests_of_test_gpt2(collected):
    (plain, _), (trees, _) = GRADED[4][0], GRADED[12][0]
    everything = [test for test in collected["python -m pytest tests"] if test.startswith("tests/test_gpt2.py::")]
    assert sorted(collected[plain] + collected[trees]) == sorted(everything)


def test_every_test_exercises_names_exists(collected):
    names = {test.split("::")[-1].split("[")[0] for test in collected["python -m pytest tests"]}
    named = set(re.findall(r"`(test_\w+)`", EXERCISES))
    assert named and named <= names, sorted(named - names)


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


def test_every_function_the_step_table_names_is_in_the_file_it_names():
    """Cells like `drafters.py: PromptLookup.index, PromptLookup.lookup`."""
    cells = re.findall(r"`(\w+\.py): ([\w., ]+)`", EXERCISES)
    assert len(cells) >= 12
    for path, names in cells:
        for name in (name.strip() for name in names.split(",")):
            assert name in defined_names(path), f"{path} defines no {name}"


def test_every_step_says_what_to_read_first():
    for step, section in steps().items():
        assert "**Read first:**" in section, f"step {step}"


def test_hints_and_known_mistakes_wait_behind_an_if_you_are_stuck_line():
    """Outside `<details>` blocks (closed until clicked) no hint and no list of mistakes; each block's summary
    says when to open it."""
    summaries = re.findall(r"<details><summary>(.*?)</summary>", EXERCISES)
    assert summaries and all(s.startswith(("If you are stuck", "If a test fails")) for s in summaries), summaries
    outside = re.sub(r"<details>.*?</details>", "", EXERCISES, flags=re.S)
    for word in ("**Hint", "mistakes the tests catch"):
        assert word not in outside, f"{word!r} outside a <details> block"


def test_every_section_of_the_readme_or_benchmarks_exercises_names_is_there():
    """EXERCISES.md names parts like the README's "How a round works, with numbers" or BENCHMARKS.md's "Small
    timings": a heading, or a paragraph that opens with its name in bold."""
    named = re.findall(r'(README|BENCHMARKS)(?:\.md)?(?:\'s)? "([^"]+)"', EXERCISES)
    assert named
    for page, name in set(named):
        text = (REPO_ROOT / f"{page}.md").read_text(encoding="utf-8")
        assert re.search(rf"^#+ {re.escape(name)}\s*$|^\*\*{re.escape(name)}\.?\*\*", text, flags=re.M), name


def test_every_function_named_as_in_a_file_is_defined_there():
    """Phrases like "`brute_force_lookup` in `tests/test_drafters.py`": code moves, and the phrase must follow."""
    named = re.findall(r"`([\w.]+)` in `((?:\w+/)*\w+\.py)`", EXERCISES)
    assert named
    for name, path in named:
        assert name in defined_names(path), f"{path} defines no {name}"


def test_exercises_cite_no_issue_numbers():
    assert not re.search(r"#\d|\bissues? \d", EXERCISES, flags=re.I)
