"""How every command of the project starts and ends: main.py, tools/benchmark.py and the tools/ scripts alike.

Read command_line/flags.py first (main.py's flags, each checked before anything runs). Nothing here is about GPT-2; it is
what a command owes the person who typed it:

- Flags are checked before any work. A script's flags are fire's (`--name value`, `--flag`/`--noflag`), and
  fire alone would notice a misspelt one only after the whole measurement had run: `run_script` checks every
  flag's NAME first (`parse_command_line`), and each script's main() checks the VALUES first thing, with
  flags.py's checkers and the list checkers below. A bad flag is one line `error: ...` and exit code 2.
- The standard output is checked before any work: `python main.py >&-` starts Python without one, and the
  first print, after minutes of loading, would fail.
- Ctrl-C ends a run with the one line `Interrupted.` and exit code 130 (128 + SIGINT, as shells report it).
  It is Python's KeyboardInterrupt, which Ctrl-C raises on Linux, macOS and Windows alike. Where the output and
  the errors are one file (a terminal, `2>&1`) and a text was cut mid-line, the line starts on a line of its own.
- A full disk (or a file past the system's size limit, or a quota) is one line naming the file, exit code 1;
  memory run out past a limit no check could see (`ulimit -v`) is one line too, exit code 1.
- A reader that goes away (`python main.py | head`) ends the run quietly, as Unix tools do.
- In a student copy (classroom.py student), a run that reaches a function still blank is one line naming the
  step to write, exit code 1: the copy's blanks raise NotImplementedError("Step N: write ...") (BLANK_STEP).
- NaN or infinite numbers from a model (checks.py's errors, which name NaN: damaged weights, or a forward pass
  that overflowed) are one line, exit code 1, in main.py and in every tool that decodes.
"""

import difflib
import errno
import inspect
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import fire

from command_line.flags import MAX_SHOWN, as_number, as_text, as_whole_number, check_writable, errors_as_one_line
from command_line.flags import first_existing
from loaders.messages import os_error_text, shown

EXIT_INTERRUPTED = 130  # 128 + SIGINT (2): what a shell reports for a command ended by Ctrl-C
DISK_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


# ------------------------------------------------------------------------------------------------------------
# Starting and ending
# ------------------------------------------------------------------------------------------------------------


def check_stdout():
    """ValueError unless the standard output can be written (a test's captured output always can)."""
    if sys.stdout is None:
        raise ValueError("the standard output is closed (>&-): give the run somewhere to write, e.g. > out.txt, or "
                         "> /dev/null to throw its text away")
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): nothing to check
        return
    try:
        os.write(descriptor, b"")  # nothing written; a descriptor open only for reading fails
    except OSError as error:
        raise ValueError(f"the standard output cannot be written ({error.strerror}): give the run somewhere to "
                         f"write, e.g. > out.txt") from None


# how course/exercises.py blanks a function in a student copy: "Step 5: write Encoder.bpe (see EXERCISES.md)"
BLANK_STEP = re.compile(r"Steps? (\d+)[\d, and]*: write .* \(see EXERCISES\.md\)")


@contextmanager
def ending_as_one_line():
    """Inside: Ctrl-C is `Interrupted.` and exit code 130; a full disk one `error:` line naming the file, exit
    code 1; memory run out one `error:` line, exit 1; a reader that went away (BrokenPipeError) a quiet exit 1;
    a student copy's blank function (BLANK_STEP) one `error:` line naming its step, exit 1; checks.py's NaN
    error one `error:` line, exit 1. Any other exception is left alone."""
    tracked = _line_ends_tracked()
    try:
        yield
    except KeyboardInterrupt:
        mid_line = tracked is not None and tracked.mid_line
        _stdout_to_nowhere()
        print("\nInterrupted." if mid_line else "Interrupted.", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except BrokenPipeError:
        _stdout_to_nowhere()
        raise SystemExit(1) from None
    except MemoryError as error:  # past a memory limit (`ulimit -v`, a container's) the checks could not see
        _stdout_to_nowhere()
        print(f"error: out of memory ({error or 'no more could be allocated'}): the models and their caches need "
              f"more than this process may use; free some memory, raise the limit (ulimit -v), or use smaller "
              f"models or fewer tokens", file=sys.stderr)
        raise SystemExit(1) from None
    except NotImplementedError as error:
        blank = BLANK_STEP.fullmatch(str(error))
        if blank is None:
            raise
        _error_line(f"{error}: this run needs it, and this copy's is still blank (`python classroom.py grade "
                    f"{blank[1]}` checks it once written)", tracked)
    except ValueError as error:
        if "NaN" not in str(error):  # checks.check_finite and check_probs name NaN in their messages
            raise
        _error_line(str(error), tracked)
    except OSError as error:
        if error.errno not in DISK_FULL:
            raise
        _stdout_to_nowhere()
        print(f"error: {os_error_text(error, 'the output (or a file being written)')}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        if tracked is not None and sys.stdout is tracked:
            sys.stdout = tracked.stream


class LineEnds:
    """The standard output, noting whether what was last written to it ended its line (a text streamed token by
    token does not): `Interrupted.` then starts a line of its own."""

    def __init__(self, stream):
        self.stream, self.mid_line = stream, False

    def write(self, text):
        self.mid_line = text[-1:] != "\n" if text else self.mid_line
        return self.stream.write(text)

    def __getattr__(self, name):  # everything else is the stream's own
        return getattr(self.stream, name)


def _error_line(text, tracked):
    """`error: text` on stderr, on a line of its own after what the run printed (a text streamed mid-line), and
    exit code 1."""
    sys.stdout.flush()
    start = "\n" if tracked is not None and tracked.mid_line else ""
    print(f"{start}error: {text}", file=sys.stderr)
    raise SystemExit(1) from None


def _line_ends_tracked():
    """sys.stdout, replaced by a LineEnds of it, where the output and the errors are one file (a terminal, or
    `2>&1`: an error line written after half a line of text would end that line); None elsewhere."""
    try:
        same = os.path.samestat(os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno()))
    except (AttributeError, OSError, ValueError):  # no file behind one of them (a test's capture, >&-)
        return None
    if same:
        sys.stdout = LineEnds(sys.stdout)
        return sys.stdout
    return None


def _stdout_to_nowhere():
    """Point the standard output at the null device: what is still buffered for a pipe whose reader is gone or
    a full disk must not fail once more when Python flushes it on the way out."""
    try:
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError):
        pass  # this is the output that failed: what it held is lost either way
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        pass  # no standard output, or not a file (a test's capture)


# ------------------------------------------------------------------------------------------------------------
# The command line: fire's syntax, its flags' names checked before anything runs
# ------------------------------------------------------------------------------------------------------------


def _is_flag(argument):
    """fire's rule: --anything, or -x..., but not a negative number such as -1."""
    return argument.startswith("--") or re.match(r"^-[a-zA-Z]", argument) is not None


def parse_command_line(argv, function, script="main.py"):
    """The keyword arguments that `argv` gives `function`, as text (True/False for a bare --flag / --noflag).

    The syntax is fire's (see the module docstring). An unknown flag is a ValueError naming the closest known
    one; so is a value given twice, an ambiguous -x, or more values by position than the function takes.
    `script` is named in the messages (tools/benchmark.py and the tools/ scripts check their flags here too).
    >>> parse_command_line(["--K=3", "--nokv_cache", "--temprature", "0"], main)
    Traceback (most recent call last):
    ...
    ValueError: unknown flag --temprature (did you mean --temperature?); python main.py --help lists every flag
    """
    parameters = inspect.signature(function).parameters
    names = [name for name, p in parameters.items() if p.kind is not p.VAR_POSITIONAL]
    takes_any_number = len(names) < len(parameters)  # a *args (classroom.py gradebook SUB1 SUB2 ...)
    kwargs, positional, i = {}, [], 0
    while i < len(argv):
        argument = argv[i]
        if argument == "--":
            raise ValueError(f"a bare -- (fire's separator for its own flags) is not used by {script}: "
                             f"python {script} --help lists every flag")
        if not _is_flag(argument):
            positional.append(argument)
            i += 1
            continue
        key, has_value, value = argument.lstrip("-").partition("=")
        key = key.replace("-", "_")
        bare = not has_value and (i + 1 == len(argv) or _is_flag(argv[i + 1]))
        if key in names:
            name = key
        elif bare and key.startswith("no") and key[2:] in names:
            name, value = key[2:], False
        elif len(key) == 1 and key.islower() and any(n[0] == key.upper() for n in names):  # -k, a keystroke from -K
            both = ", ".join("--" + n for n in names if n[0].lower() == key.lower())
            raise ValueError(f"-{key} is one keystroke from -{key.swapcase()}: spell the flag out ({both})")
        elif len(key) == 1 and len([n for n in names if n[0] == key]) == 1:
            name = next(n for n in names if n[0] == key)
        elif len(key) == 1 and [n for n in names if n[0] == key]:
            matches = ", ".join("--" + n for n in names if n[0] == key)
            raise ValueError(f"-{key} is ambiguous: it could be any of {matches}; spell the flag out")
        else:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
            hint = f" (did you mean --{close[0]}?)" if close else ""
            flag = argument.split("=")[0]
            flag = flag if len(flag) <= MAX_SHOWN else f"{flag[:MAX_SHOWN]}... ({len(flag):,} characters)"
            raise ValueError(f"unknown flag {flag}{hint}; python {script} --help lists every flag")
        if name in kwargs:
            raise ValueError(f"--{name} is given twice; give it once")
        if has_value or value is False:
            kwargs[name] = value
        elif bare:
            kwargs[name] = True
        else:
            kwargs[name] = argv[i + 1]
            i += 1
        i += 1
    free = [name for name in names if name not in kwargs and parameters[name].kind is not parameters[name].KEYWORD_ONLY]
    if len(positional) > len(free) and not takes_any_number:
        quotes = " (--prompt \"...\"); a prompt with spaces needs quotes" if "prompt" in names else ""
        raise ValueError(f"unexpected argument {shown(positional[len(free)])}: give values as flags{quotes}; "
                         f"python {script} --help lists them")
    if free[:2] == ["prompt", "n_tokens_to_generate"] and len(positional) > 1 and not positional[1].strip().isdigit():
        raise ValueError(f"{shown(positional[1])} follows the prompt {shown(positional[0])} where the number of tokens "
                         f"would go: a prompt of several words needs quotes (python {script} \"{positional[0][:40]} "
                         f"{positional[1][:40]} ...\")")
    kwargs.update(zip(free, positional))
    needed = [name for name in names if parameters[name].default is inspect.Parameter.empty
              and parameters[name].kind is not inspect.Parameter.VAR_KEYWORD]
    missing = [name.upper() for name in needed if name not in kwargs]
    if missing:  # fire would print its usage over many lines
        raise ValueError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} needed: python {script} "
                         f"{' '.join(missing)} (python {script} --help says more)")
    return kwargs


def run_script(main, argv, script, as_text=False):
    """`python SCRIPT ARGS` for a script whose main() takes fire's flags: --help (or -h) anywhere is fire's help
    of main; otherwise the output and every flag's name are checked before main() runs (main checks the values
    first thing), and the run ends as ending_as_one_line says. fire reads the values ("1,2" a tuple, "4" an
    int); with as_text, main() gets each as the text typed, as main.py's does (a prompt with a comma stays one
    text). A terminal whose encoding cannot show a character gets it as an escape (\\xe9)."""
    if any(argument in ("--help", "-h") for argument in argv):  # fire's help of main alone: handed the whole
        with ending_as_one_line():  # line, fire read -h as a flag and ran main before --help; `| head` ends quietly
            try:
                fire.Fire(main, command=["--help"], name=script)
            finally:
                sys.stdout.flush()
        return
    with ending_as_one_line():
        with errors_as_one_line():
            check_stdout()
            kwargs = parse_command_line(argv, main, script)  # the names (and how many values by position)
        if hasattr(sys.stdout, "reconfigure"):  # a real stream (not a test's capture)
            sys.stdout.reconfigure(errors="backslashreplace")
        if as_text:
            main(**kwargs)
        else:
            fire.Fire(main, command=list(argv), name=script)


# ------------------------------------------------------------------------------------------------------------
# Checking the scripts' values (fire gives "1,2,4" as a tuple, "4" as an int, "16,x" as a string)
# ------------------------------------------------------------------------------------------------------------


def as_items(value, flag):
    """The items of a comma-separated flag: a tuple or list as it is, text split at its commas, one value alone."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if value is None or isinstance(value, bool):
        raise ValueError(f"{flag} needs a value: a comma-separated list like 1,2,4")
    return [value]


def as_whole_numbers(value, flag, minimum=1, words=()):
    """[int >= minimum] of a comma-separated flag ("16,64" or fire's (16, 64)); `words` (like "auto") pass as
    text. An empty list is an error: a measurement of nothing would print an empty table."""
    items = as_items(value, flag)
    if not items:
        raise ValueError(f"{flag} is empty: give a comma-separated list like 1,2,4")
    numbers = []
    for item in items:
        if isinstance(item, str) and item.strip().lower() in words:
            numbers.append(item.strip().lower())
            continue
        try:
            numbers.append(as_whole_number(item, flag, minimum))
        except ValueError:
            also = f" or {', '.join(words)}" if words else ""
            raise ValueError(f"{flag} takes whole numbers >= {minimum}{also}, comma-separated; got {shown(item)} in "
                             f"{shown(value)}") from None
    return numbers


def as_fractions(value, flag):
    """[float in [0, 1]] of a comma-separated flag (acceptance rates)."""
    items = as_items(value, flag)
    fractions = [as_number(item, flag) for item in items]
    if not fractions or not all(0 <= f <= 1 for f in fractions):
        raise ValueError(f"{flag} takes numbers from 0 to 1, comma-separated; got {shown(value)}")
    return fractions


def as_names(value, flag, allow_empty=False):
    """[str] of a comma-separated flag of names (sizes, texts, parts)."""
    names = [as_text(item, flag).strip() for item in as_items(value, flag)] if value not in (None, "") else []
    if not names and not allow_empty:
        raise ValueError(f"{flag} is empty: give at least one name")
    return names


def check_output_folder(folder, flag):
    """ValueError unless `folder` is a folder files can be written into, or can be made (it is not made here)."""
    if not as_text(folder, flag).strip():  # Path("") is the current folder: an empty flag is a slip, not a choice
        raise ValueError(f"{flag} is empty: name a folder")
    try:
        path = Path(as_text(folder, flag))
        existing = first_existing(path)
    except (OSError, ValueError) as error:  # a NUL character, a name too long
        raise ValueError(f"{flag} {shown(folder)} cannot be a folder: {getattr(error, 'strerror', None) or error}")
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, so no folder can be made there; name a folder")
    try:
        descriptor, probe = tempfile.mkstemp(dir=existing, prefix=".write-test-")
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"{flag} {path}: nothing can be written in {existing} ({error.strerror}); name another "
                         f"folder") from None
    return path


def check_output_file(path, flag):
    """ValueError unless a file can be written at `path` (in an existing folder); None passes (no file)."""
    if path is None:
        return None
    path = Path(as_text(path, flag))
    if not path.parent.is_dir():
        existing = first_existing(path.parent)
        if existing.exists() and not existing.is_dir():
            raise ValueError(f"{flag} {path}: {existing} is a file, so no file can be written under it")
        raise ValueError(f"{flag} {path}: the folder {path.parent} does not exist; name a file in an existing folder")
    check_writable(path, flag)
    return path
