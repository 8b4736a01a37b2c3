"""The reading path: the lines of the core one speculative `python main.py` run takes a learner through, at most 600.

Read tools/reading_path.py first: it counts each executed function of main.py, gpt2.py, sampling.py, model_fn.py
and records.py whole (decorators, docstring and comments included), each line once, and nothing else.
"""

import importlib.util
import subprocess
import sys

from conftest import REPO_ROOT
from tools.reading_path import BUDGET, function_spans, measure, reading_lines, recorded_calls, report

# The tests name this text's lines by number: 1 is the module docstring, 7 the decorator of outer.
SOURCE = '''\
"""A module."""
import functools

LIMIT = 3


@functools.lru_cache()
def outer(x):
    """Twice x."""
    def inner(y):
        return 2 * y
    return inner(x)


class Box:
    size: int = 1

    def grow(self):
        self.size += 1

    @property
    def double(self):
        """Twice the size."""
        return 2 * self.size


def unused():
    return [n for n in range(LIMIT)]
'''


def test_a_function_spans_from_its_first_decorator_to_its_last_line_at_any_depth():
    """outer: the decorator (7) to `return inner(x)` (12); inner: 10-11 inside it; Box.grow 18-19; the property
    Box.double from `@property` (21) to 24; unused 27-28. `LIMIT = 3` (4) and the class body (15-16) are no
    function; the list comprehension is part of unused."""
    assert function_spans(SOURCE) == {7: (7, 12, "outer"), 10: (10, 11, "outer.inner"), 18: (18, 19, "Box.grow"),
                                      21: (21, 24, "Box.double"), 27: (27, 28, "unused")}


def test_the_lines_read_are_the_union_of_the_executed_functions_and_nothing_else():
    """outer (6 lines, 7-12) with its closure inner (10-11, already inside) and Box.double (4 lines, 21-24): 10
    lines. The module's code (first line 1), the class body (15), a code object that starts on a def's line
    but is not that function (27, a <listcomp>) and a file not asked about are no functions read."""
    executed = {("m.py", 7, "outer"), ("m.py", 10, "inner"), ("m.py", 21, "double"), ("m.py", 1, "<module>"),
                ("m.py", 15, "Box"), ("m.py", 27, "<listcomp>"), ("other.py", 7, "outer")}
    lines = reading_lines(executed, {"m.py": SOURCE})
    assert lines == {"m.py": set(range(7, 13)) | set(range(21, 25))}
    assert len(lines["m.py"]) == 10


TINY_SCRIPT = '''\
import json


def used():
    return json.dumps([1])


def never():
    return 0


class Box:
    def __init__(self):
        self.size = 1

    @property
    def size_twice(self):
        return 2 * self.size

    def unused_method(self):
        return 1


def run():
    def helper():
        return used()
    return helper(), Box().size_twice
'''


def test_the_tracer_records_exactly_the_functions_a_script_runs(tmp_path):
    """run (24) calls its closure helper (25), which calls used (4); Box() runs __init__ (13), and the property
    size_twice (16, its decorator's line) runs too. never, unused_method and json's own code are not recorded."""
    path = tmp_path / "tiny.py"
    path.write_text(TINY_SCRIPT, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("tiny_reading_path_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with recorded_calls({path: "tiny.py"}) as calls:
        module.run()
    assert calls == {("tiny.py", 24, "run"), ("tiny.py", 25, "helper"), ("tiny.py", 4, "used"),
                     ("tiny.py", 13, "__init__"), ("tiny.py", 16, "size_twice")}
    assert reading_lines(calls, {"tiny.py": TINY_SCRIPT}) == {"tiny.py": {4, 5, 13, 14, 16, 17, 18, 24, 25, 26, 27}}


def test_a_bad_flag_is_one_line_and_exit_code_2_before_any_work(tmp_path):
    for flags, expected in ((["--budget", "0"], "--budget must be a whole number >= 1; got 0"),
                            (["--lst"], "unknown flag --lst (did you mean --list?)")):
        run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "reading_path.py"), *flags], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert run.returncode == 2 and run.stdout == "", run.stderr
        assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], run.stderr


def test_one_speculative_main_run_reads_at_most_600_lines(release_124M_dir):
    """One `python main.py` run with its defaults (a draft model, K=4, greedy) on two tiny random models: the
    functions it executes in main.py, gpt2.py, sampling.py, model_fn.py and records.py, docstrings included, are
    the code a learner who follows the run reads. picoGPT's gpt2.py and jaymody's speculative sampler together
    are about half the budget."""
    functions, lines = measure()
    assert set(lines) == {"main.py", "gpt2.py", "sampling.py", "model_fn.py", "records.py"}
    assert all(lines[file] for file in ("main.py", "gpt2.py", "sampling.py")), report(functions, lines)  # seen
    total = sum(len(read) for read in lines.values())
    assert total <= BUDGET, "\n".join(report(functions, lines, BUDGET, listing=True))
