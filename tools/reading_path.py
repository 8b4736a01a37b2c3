"""The reading path: how many lines of the core one speculative `python main.py` run takes a learner through (a tool).

Read the README's "The files, in reading order" first: this counts what a learner who follows one run reads.

    python tools/reading_path.py               # the total and each file's, against the budget of 600 lines
    python tools/reading_path.py --list        # and every function the run executed, with its lines
    python tools/reading_path.py --budget 500  # another budget

What counts: every function (a method, a property, a lambda too) of main.py, gpt2.py, sampling.py, model_fn.py
and records.py that the run executes, whole, from its first decorator to its last line, docstring and comments
included: reading a function means reading all of it. A function inside another one (a closure) lies inside the
outer one's lines, and each line of a file counts once. Module-level code and class bodies (a dataclass's field
lines) do not count, nor what Python generates (a dataclass's __init__), nor code outside the five files (speed/,
loaders/, command_line/, NumPy): they are the machinery a learner takes on trust.

The run: `python main.py`, in this process (main.py run as __main__), with its default flags (speculative sampling,
a draft model, K=4, greedy) but for the models and the length: two tiny random GPT-2 folders written into a
temporary folder (tools/model_files.py's Hugging Face writer; the draft is the target plus noise, so rounds keep
guesses and reject some, as real ones do) and N_TOKENS new tokens, so that it takes seconds. Every function call in
it is recorded (sys.settrace, 'call' events only); the run's own output is swallowed. The models need OpenAI's
tokenizer files from $GPT2_MODELS_DIR/124M, else models/124M.

The counting lives in small pure functions (function_spans, reading_lines), which tests/test_reading_path.py
checks on a text of its own; that file also holds the core to the budget.
"""

import ast
import contextlib
import importlib
import io
import os
import runpy
import sys
import tempfile
from pathlib import Path

import numpy as np

# `python tools/reading_path.py` puts tools/ first on the path: put the repository's root there too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from command_line.flags import as_whole_number, errors_as_one_line  # noqa: E402
from command_line.scripts import run_script  # noqa: E402
from loaders.random_weights import random_params  # noqa: E402
from loaders.messages import shown  # noqa: E402
from tools.model_files import write_hf_folder  # noqa: E402
from tools.random_models import near_params  # noqa: E402
from tools.release_files import REPO_ROOT, tokenizer_folder  # noqa: E402

READING_FILES = ("main.py", "gpt2.py", "sampling.py", "model_fn.py", "records.py")  # the core one run reads
BUDGET = 600  # lines: picoGPT's gpt2.py and jaymody's speculative sampler together are about half of it
HPARAMS = {"n_vocab": 50257, "n_ctx": 128, "n_embd": 64, "n_head": 4, "n_layer": 2}  # tiny, with GPT-2's vocabulary
N_TOKENS = 12  # new tokens: a few rounds of K=4


# ------------------------------------------------------------------------------------------------------------
# Counting: which lines a function is, which lines a run reads
# ------------------------------------------------------------------------------------------------------------


def function_spans(source):
    """{first line: (start, end, name)} for every function in a Python source text, at any depth.

    The key is the line a function's code object names as its first (co_firstlineno): its first decorator's,
    else its `def` line; (start, end) are its first and last line; name is qualified ("Cache.length",
    "main.new_draft", "main.<lambda>"). A lambda on the line of a def is left out (it lies in the def's lines).

    >>> function_spans("@cache\\ndef f(x):\\n    return x\\n")
    {1: (1, 3, 'f')}
    """
    spans = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                name = prefix + (child.name if not isinstance(child, ast.Lambda) else "<lambda>")
                decorators = getattr(child, "decorator_list", [])
                start = min([child.lineno] + [decorator.lineno for decorator in decorators])
                if start not in spans or not isinstance(child, ast.Lambda):
                    spans[start] = (start, child.end_lineno, name)
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return spans


def executed_functions(executed, sources):
    """{file: [(start, end, name)] in the order of the file}: the functions behind the recorded code objects.

    executed: (file, co_firstlineno, co_name) of each code object run; sources: {file: its text}. A code object
    that is no function of the file (a module, a class body, a comprehension) matches no span and is left out.
    """
    spans = {file: function_spans(source) for file, source in sources.items()}
    found = {file: set() for file in sources}
    for file, first_line, code_name in executed:
        span = spans.get(file, {}).get(first_line)
        if span is not None and span[2].rsplit(".", 1)[-1] == code_name:
            found[file].add(span)
    return {file: sorted(functions) for file, functions in found.items()}


def reading_lines(executed, sources):
    """{file: the set of its line numbers a reader of the executed functions reads}: the union of their spans,
    so that a closure's lines, which lie inside its outer function's, count once."""
    return {file: {line for start, end, _ in functions for line in range(start, end + 1)}
            for file, functions in executed_functions(executed, sources).items()}


@contextlib.contextmanager
def recorded_calls(files):
    """Inside: every call of a function whose code is in one of files ({path: name}) adds (name, co_firstlineno,
    co_name) to the set this yields. Only 'call' events are asked for (the tracer returns None: no line events).
    """
    wanted = {os.path.realpath(path): name for path, name in files.items()}
    names = {}  # co_filename -> name or None, resolved once
    calls = set()

    def tracer(frame, event, arg):
        code = frame.f_code
        if code.co_filename not in names:
            names[code.co_filename] = wanted.get(os.path.realpath(code.co_filename))
        name = names[code.co_filename]
        if name is not None:
            calls.add((name, code.co_firstlineno, code.co_name))
        return None

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield calls
    finally:
        sys.settrace(before)


# ------------------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------------------


def write_models(folder, tokenizer):
    """(draft folder, target folder): tiny random GPT-2s of HPARAMS, the draft the target plus noise."""
    target = random_params(HPARAMS, np.random.default_rng(1), std=0.5)
    draft = near_params(target, np.random.default_rng(5), 0.2)
    return (write_hf_folder(Path(folder) / "draft", draft, HPARAMS, tokenizer),
            write_hf_folder(Path(folder) / "target", target, HPARAMS, tokenizer))


def run_main(draft, target, root=REPO_ROOT):
    """`python main.py --draft_model_size DRAFT --target_model_size TARGET --n_tokens_to_generate N_TOKENS` in
    this process (runpy: main.py as __main__), its output swallowed; a run that ends with an exit code other
    than 0 is a RuntimeError with what it wrote to stderr."""
    argv = ["main.py", "--draft_model_size", str(draft), "--target_model_size", str(target),
            "--n_tokens_to_generate", str(N_TOKENS)]
    out, err, before = io.StringIO(), io.StringIO(), sys.argv
    try:
        sys.argv = argv
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(str(Path(root) / "main.py"), run_name="__main__")
    except SystemExit as ended:
        if ended.code not in (None, 0):
            raise RuntimeError(f"main.py's run ended with exit code {ended.code}: {err.getvalue().strip()}") from None
    finally:
        sys.argv = before


def measure(root=REPO_ROOT):
    """(executed functions, lines read) of one speculative main.py run: executed_functions' and reading_lines'
    dicts for READING_FILES."""
    tokenizer = tokenizer_folder()
    sources = {name: (Path(root) / name).read_text(encoding="utf-8") for name in READING_FILES}
    for name in READING_FILES:  # imported before: importing defines the functions, it runs none of them
        importlib.import_module(name[: -len(".py")])
    with tempfile.TemporaryDirectory() as folder:
        draft, target = write_models(folder, tokenizer)
        with recorded_calls({Path(root) / name: name for name in READING_FILES}) as calls:
            run_main(draft, target)
    return executed_functions(calls, sources), reading_lines(calls, sources)


def report(functions, lines, budget=BUDGET, listing=False):
    """The lines to print: the total against the budget and each file's; with listing, each function too."""
    total = sum(len(read) for read in lines.values())
    verdict = "within it" if total <= budget else f"{total - budget} over"
    files = ", ".join(f"{file} {len(read)}" for file, read in lines.items())
    out = [f"reading path: {total} lines (budget {budget}, {verdict}): {files}"]
    if listing:
        for file, spans in functions.items():
            out.append(f"\n{file}: {len(lines[file])} lines")
            for start, end, name in spans:
                inside = any(s <= start and end <= e and (s, e) != (start, end) for s, e, _ in spans)
                note = "  (inside another one: counted there)" if inside else ""
                out.append(f"  {end - start + 1:4d}  {name} (lines {start}-{end}){note}")
    return out


def main(budget=BUDGET, list=False):  # noqa: A002  the flag is --list
    """Print the reading path of one speculative `python main.py` run against the budget. Exit code 1 when the
    path is longer than the budget.

    Args:
        budget: the most lines the path may have.
        list: print every executed function with its lines too.
    """
    with errors_as_one_line():  # a bad flag or missing tokenizer files: one line, exit code 2
        if not isinstance(list, bool):
            raise ValueError(f"--list takes no value (it is on or off); got --list={shown(list)}")
        budget = as_whole_number(budget, "--budget", 1)
        functions, lines = measure()
    print("\n".join(report(functions, lines, budget, listing=list)))
    if sum(len(read) for read in lines.values()) > budget:
        raise SystemExit(1)


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/reading_path.py")
