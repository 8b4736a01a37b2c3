"""main.py's flags: every value checked before anything runs, errors as one line.

Read main.py first: this file is what stands between `python main.py --K four` and the demo. A learner can skim
it; nothing here is about GPT-2 or speculative sampling, only about saying clearly what was wrong with a flag.

`python main.py` reads its flags with the same syntax as fire (`--name value`, `--name=value`, `--flag` /
`--noflag` for booleans, `-x` for a unique first letter, values by position in the order of main()'s
arguments): command_line/scripts.parse_command_line reads them, as text, and this file checks each value (main's
`check_flags`) before anything runs. fire alone would run the whole comparison before complaining about a
misspelt flag, and would read `--kv_cache false` as the (true) string "false" and `--prompt "Hello, world"` as
a tuple. `--help` is fire's (main.run_command_line calls it).

Every check raises a ValueError that says what was wrong and what to do; errors_as_one_line turns it (and a
failed download or a damaged checkpoint) into one line `error: ...` and exit code 2 (bad input) or 1.
"""

import difflib
import math
import os
import re
import sys
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np


import show
from loaders.download import MODEL_SIZES, DownloadError, download_deadline
from loaders.hub import HUB_MODELS, check_hub_cache, check_model_name, hub_repo_id
from loaders.weights import CheckpointError
from loaders.messages import os_error_text, shown

RELEASED_N_CTX = 1024  # the context of all four released sizes
DRAFTERS = ("model", "lookup", "staged")
# The smallest temperature > 0 that no float32 logit can overflow when divided by it in float64:
# float32's largest value / float64's largest value = 3.4e38 / 1.8e308 = 1.9e-270.
MIN_TEMPERATURE = float(np.finfo(np.float32).max) / float(np.finfo(np.float64).max)
MAX_DOWNLOAD_RETRIES = 20  # the waits double (1, 2, 4, ... s): 20 retries already wait up to 2^20 s, 12 days
K_POLICIES = ("auto", "hf")  # --K's words: lookahead.AutoK and lookahead.HFSchedule choose each round's k
MAX_WHOLE_NUMBER = 2**63 - 1  # NumPy's largest int64: far more than any count here can mean
MAX_SEED = 2**128 - 1  # NumPy takes larger seeds, but 128 bits of seed are plenty
BOUND_NAMES = {MAX_WHOLE_NUMBER: "2**63 - 1", MAX_SEED: "2**128 - 1"}
# A sign and digits. (Not "0*(\d+)": two ways to split a run of zeros make a failing match try them all, which
# takes minutes on 100,000 zeros; leading zeros are stripped in as_whole_number instead.)
WHOLE_NUMBER = re.compile(r"\s*([-+]?)(\d+)\s*")
MAX_SHOWN = 60  # characters of a flag's value that an error message quotes (as messages.shown does)


# ------------------------------------------------------------------------------------------------------------
# Checking the flags (the only place where bad input is expected), before anything is downloaded
# ------------------------------------------------------------------------------------------------------------


def check_whole_number(value, flag, minimum):
    """ValueError unless value is an int >= minimum (fire turns `--K 4` into 4, `--K four` into "four")."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{flag} must be a whole number >= {minimum}; got {shown(value)}")


def check_model_names(draft_model_size, target_model_size):
    """ValueError unless each model is a name utils.resolve_model understands (a draft of None is not checked):
    a released size, a Hugging Face name or id, or a local folder. No network is used."""
    for flag, name in (("--draft_model_size", draft_model_size), ("--target_model_size", target_model_size)):
        if name is not None:
            try:
                check_model_name(name)
            except ValueError as error:
                raise ValueError(f"{flag}: {error}") from None
    if any(name is not None and name not in MODEL_SIZES and hub_repo_id(name) and not Path(name).is_dir()
           for name in (draft_model_size, target_model_size)):
        check_hub_cache()  # a Hub name is read from (or downloaded into) the Hugging Face cache


def as_whole_number(value, flag, minimum, maximum=MAX_WHOLE_NUMBER):
    """value as an int in [minimum, maximum]: an int, or text of one ("40"); anything else is a ValueError.

    The digits are counted before int() reads them: a 5,000-digit --seed is out of range, not a reason for
    Python's own digit-limit message.
    >>> as_whole_number("40", "--n_tokens_to_generate", 1)
    40
    """
    original = value
    if isinstance(value, str) and (match := WHOLE_NUMBER.fullmatch(value)):
        sign, digits = match[1], match[2].lstrip("0") or "0"  # leading zeros are not counted
        if len(digits) > len(str(maximum)):  # more digits than the maximum has: out of range whatever they are
            value = -math.inf if sign == "-" else math.inf
        else:
            value = int(sign + digits)
    if value == -math.inf:
        raise ValueError(f"{flag} must be a whole number >= {minimum}; got {shown(original)}")
    if value != math.inf:
        check_whole_number(value, flag, minimum)
    if value > maximum:
        bound = BOUND_NAMES.get(maximum, str(maximum))
        raise ValueError(f"{flag} must be a whole number from {minimum} to {bound}; got {shown(original)}")
    return value


def as_number(value, flag):
    """value as a finite float: a number, or text of one ("0.8", "1e-3"); anything else is a ValueError.

    Text of a number that float64 cannot hold is refused, not rounded: "1e999" (infinite) and "1e-999" (which
    would round to 0, and a temperature of 0 means greedy decoding).
    """
    original = value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{flag} must be a number; got {shown(original)}") from None
        if value == 0 and re.search(r"[1-9]", re.split(r"[eE]", original)[0]):
            raise ValueError(f"{flag} {shown(original)} is too close to 0 for a float64 (it would round to 0); "
                             f"write 0 for 0")
    elif isinstance(value, int) and not isinstance(value, bool):
        value = float(value) if abs(value) < 2**1024 else math.inf  # float(10**400) is an OverflowError
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{flag} must be a finite number; got {shown(original)}")
    return float(value) + 0.0  # + 0.0 turns -0.0 into 0.0: `--temperature -0` is greedy, and is printed as 0.0


def as_bool(value, flag):
    """value as a bool: True/False, or the text true/false in any case; anything else is a ValueError.

    >>> as_bool("FALSE", "--kv_cache")
    False
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{flag} must be true or false; got {shown(value)}")


def as_optional(value, convert, *args):
    """None for None or the text "none" (any case); else convert(value, *args)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    return convert(value, *args)


def as_text(value, flag):
    """value as a str (from Python, fire may have made a number of it); a bare --flag (True) has no text.

    The text must be UTF-8: bytes that are not (a shell in another encoding, say) reach Python as "surrogate
    escapes", which the tokenizer, the terminal and the file system would each refuse later, and less clearly.
    """
    if isinstance(value, bool):
        raise ValueError(f"{flag} needs a value: {flag} TEXT")
    if isinstance(value, (list, tuple, dict)):
        raise ValueError(f"{flag} must be text; got {shown(value)}")
    if isinstance(value, int) and abs(value) >= 10**MAX_SHOWN:
        raise ValueError(f"{flag} must be text; got {shown(value)}")
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        what = f"the byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"the lone surrogate U+{code:04X}"
        raise ValueError(f"{flag} is not valid UTF-8 text: it holds {what} at character {error.start}; give it "
                         f"in UTF-8") from None
    return text


def as_typed_text(value, flag):
    """as_text for text that is read as text (a prompt), not used as a file name: bytes a C or POSIX locale could
    not decode reach sys.argv as surrogate escapes even when they are UTF-8, and are read as UTF-8 here.

    `LANG=C python main.py --prompt café` gives 'caf\\udcc3\\udca9', whose bytes (os.fsencode) are 'café' in
    UTF-8. A file name keeps its escapes (as_text): that is how this process's file system calls find the file.
    """
    try:
        text = os.fsencode(value).decode("utf-8") if isinstance(value, str) else value
    except (UnicodeError, ValueError):  # not the locale's escapes, or bytes that are not UTF-8
        text = value  # as_text names the first bad character
    return as_text(text, flag)


def as_seconds(value, flag):
    """value as a number of seconds > 0 (a float): text of one ("600", "1.5") or a number."""
    seconds = as_number(value, flag)
    if seconds <= 0:
        raise ValueError(f"{flag} must be a number of seconds > 0; got {shown(value)}")
    return seconds


def as_K(value):
    """K as an int >= 1, or a policy that picks each round's lookahead: "auto" (lookahead.AutoK, from what
    earlier rounds showed) or "hf" (lookahead.HFSchedule, Hugging Face's schedule)."""
    if isinstance(value, str) and value.strip().lower() in K_POLICIES:
        return value.strip().lower()
    try:
        return as_whole_number(value, "--K", 1)
    except ValueError:
        raise ValueError(f"--K (draft tokens per round) must be a whole number >= 1 (at most 2**63 - 1), auto or "
                         f"hf; got {shown(value)}") from None


def as_tree(value):
    """The branching per depth as a tuple of ints >= 1: "2,2,1", (2, 2, 1) or 2 (one depth).

    >>> as_tree("2,2,1")
    (2, 2, 1)
    """
    if isinstance(value, (list, tuple)):
        text, parts = None, list(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        text, parts = None, [value]
    else:
        text = str(value)
        parts = [part.strip() for part in text.strip().strip("()[]").split(",")]
    if parts in ([], [""]):
        raise ValueError("--tree is empty: give the branching per depth, e.g. --tree 2,2,1")
    if text is not None and not all(WHOLE_NUMBER.fullmatch(part) for part in parts):
        raise ValueError(f"--tree must be whole numbers separated by commas, e.g. 2,2,1; got {shown(text)}")
    branching = []
    for part in parts:
        try:
            branching.append(as_whole_number(part, "--tree", 1))
        except ValueError:
            raise ValueError(f"--tree: every branching must be >= 1 (candidates per node at that depth) and at most "
                             f"2**63 - 1; got {shown(part)}") from None
    return tuple(branching)


def tree_text(branching):
    """'2,2,1' for an error message or a heading; a tree of very many depths is cut after MAX_SHOWN characters."""
    text = ",".join(map(str, branching))
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(branching):,} depths)"


def tree_nodes(branching, limit):
    """How many nodes the tree has (2,2,1 -> 2 + 4 + 4 = 10), or limit + 1 as soon as it has more than limit."""
    nodes, width = 0, 1
    for b in branching:
        width *= b
        nodes += width
        if nodes > limit:
            return limit + 1
    return nodes


def check_base_url(base_url, name="--base_url"):
    """ValueError unless base_url is None or a web address http(s)://host[:port]/... (name: where it came from)."""
    if base_url is None:
        return
    if not re.fullmatch(r"https?://[^\s/]\S*", base_url):  # (not [^\s/]+\S*: slow to fail on a long text)
        raise ValueError(f"{name} must be a web address starting http:// or https://; got {shown(base_url)}")
    try:
        urllib.parse.urlsplit(base_url).port  # a ValueError for a port out of range or a broken [IPv6] host
    except ValueError as error:
        raise ValueError(f"{name} is not a valid web address ({error}); got {shown(base_url)}") from None


def first_existing(path):
    """path itself if it exists, else its nearest parent that does (the folder a new path would be made in)."""
    return next((folder for folder in (path, *path.parents) if folder.exists()), Path("."))


def check_models_dir(models_dir):
    """ValueError unless models_dir is a folder, or a path where one can be made (what exists of it is a folder)."""
    if not models_dir.strip():  # Path("") is the current folder: an empty flag is a slip, not a choice
        raise ValueError("--models_dir is empty: name a folder to download models into")
    try:
        if "\0" in models_dir:
            raise ValueError("it holds a NUL character")
        existing = first_existing(Path(models_dir))
    except (OSError, ValueError) as error:  # a name too long for the file system, say
        reason = getattr(error, "strerror", error)
        raise ValueError(f"--models_dir {shown(models_dir)} cannot be a folder: {reason}") from None
    if existing == Path(models_dir) and not existing.is_dir():
        raise ValueError(f"--models_dir {models_dir} is a file, not a folder: name a folder to download models into")
    if not existing.is_dir():
        raise ValueError(f"--models_dir {models_dir}: {existing} is a file, so no folder can be made under it; name a "
                         f"folder to download models into")


def output_path(value, flag, example):
    """Path(value), or a ValueError unless it names a file in an existing folder (example: what to write)."""
    path = Path(value)
    try:
        if "\0" in value:
            raise ValueError("it holds a NUL character")
        misplaced = path.is_dir() or not path.parent.is_dir()
    except (OSError, ValueError) as error:  # a name too long for the file system, say
        reason = getattr(error, "strerror", error)
        raise ValueError(f"{flag} {shown(value)} cannot be written: {reason}") from None
    if misplaced:
        raise ValueError(f"{flag} must name a file in an existing folder, e.g. {example}; got {shown(value)}")
    return path


def check_plot_path(plot):
    """ValueError unless matplotlib is installed and `plot` names a file that can be written, in an existing
    folder, with a suffix matplotlib knows. Checked before the run, so a bad path does not waste one."""
    show.import_matplotlib()  # one line saying how to install it, if it is missing
    path = output_path(plot, "--plot", "rounds.png")
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise ValueError(f"--plot {plot}: the name must end in one of {', '.join('.' + f for f in formats)}")
    check_writable(path, "--plot")


def check_html_path(html):
    """ValueError unless `html` names a writable .html (or .htm) file in an existing folder, before the run."""
    path = output_path(html, "--html", "rounds.html")
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--html {shown(html)}: the name must end in .html (a web page opens by its suffix)")
    check_writable(path, "--html")


def check_writable(path, flag):
    """ValueError unless a file can be written at `path` now; nothing in the file system is left changed.

    An existing file is opened to append (which changes nothing), without waiting: a named pipe with no reader
    fails at once instead of hanging. A new file is made and removed again.
    """
    try:
        if path.exists() and not path.is_file():
            raise ValueError(f"{flag} {path} is not a regular file")
        if path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            path.unlink()
    except OSError as error:
        raise ValueError(f"{flag} {path} cannot be written: {error.strerror}") from None


def check_sampling_flags(temperature, top_k, top_p):
    """ValueError unless temperature >= 0, top_k is None or >= 1, top_p is None or in (0, 1]."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"--temperature must be a finite number >= 0 (0 is greedy decoding); got {temperature!r}")
    if 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(
            f"--temperature {temperature} is too small: logits / temperature overflows float64 for temperatures "
            f"below {MIN_TEMPERATURE:.2g} (float32's largest value / float64's); use 0 for greedy decoding"
        )
    if top_k is not None:
        check_whole_number(top_k, "--top_k", 1)
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"--top_p must be a number in (0, 1]; got {top_p!r}")


def check_fits_context(flags, n_ctx, where):
    """ValueError unless K, the tree and max_ngram fit in a context of n_ctx positions (where: whose context).

    A round's guesses sit in the context after at least one prompt token, so K, a tree's nodes and an n-gram
    are at most n_ctx - 1.
    """
    limit = n_ctx - 1
    if flags.tree is not None:
        nodes = tree_nodes(flags.tree, limit)
        if nodes > limit:
            raise ValueError(
                f"--tree {tree_text(flags.tree)} has more than {limit} nodes: it does not fit in {where} "
                f"of {n_ctx} tokens after a prompt; use fewer candidates or fewer depths"
            )
    elif flags.K not in K_POLICIES and flags.K > limit:  # auto and hf go up to lookahead.AUTO_K_MAX at most
        raise ValueError(f"--K {flags.K} is more draft tokens than {where} of {n_ctx} tokens can hold after a "
                         f"prompt: use K <= {limit}")
    if flags.drafter != "model" and flags.max_ngram is not None and flags.max_ngram > limit:
        raise ValueError(f"--max_ngram {flags.max_ngram} is longer than {where} of {n_ctx} tokens: use <= {limit}")


@dataclass
class Flags:
    """main()'s arguments after checking, with their types."""

    prompt: str
    n_tokens_to_generate: int
    draft_model_size: object  # str, or None when the drafter needs no draft model
    target_model_size: str
    K: object  # int >= 1, "auto" or "hf"
    temperature: float
    top_k: object
    top_p: object
    seed: int
    kv_cache: bool
    models_dir: str
    base_url: object
    download_retries: int
    drafter: str
    max_ngram: object  # int >= 1, or None: no cap (the longest match)
    min_ngram: int
    tree: object  # None or a tuple of ints
    color: str
    trace: bool
    plot: object
    download_deadline: object  # seconds > 0, or None: $GPT2_DOWNLOAD_DEADLINE, else download.DEFAULT_DEADLINE_SECONDS
    r_table: object  # None, or the path of a costs file (calibration.load_costs) that K=auto plans with
    verbose: bool = False  # also print what only the machine needs (the routes of the matrix products)
    plain: bool = False  # the plain core alone: create_model_fn(..., plain=True), no speed/ plugged in
    html: object = None  # None, or the file the rounds' page is written to (command_line/page.py)


def check_flags(**arguments):
    """main()'s arguments (values or their text) -> Flags, or one clear ValueError for the first bad one.

    Nothing is downloaded or loaded here; what needs the models (the prompt's length, their contexts) is
    checked by checks.check_models_fit once they are loaded.
    """
    a = arguments
    drafter = as_text(a["drafter"], "--drafter").strip().lower()
    if drafter not in DRAFTERS:
        close = difflib.get_close_matches(drafter, DRAFTERS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"--drafter must be one of {', '.join(DRAFTERS)}; got {shown(a['drafter'])}{hint}")
    flags = Flags(
        prompt=as_typed_text(a["prompt"], "--prompt"),
        n_tokens_to_generate=as_whole_number(a["n_tokens_to_generate"], "--n_tokens_to_generate", 1),
        draft_model_size=None if drafter == "lookup" else as_text(a["draft_model_size"], "--draft_model_size"),
        target_model_size=as_text(a["target_model_size"], "--target_model_size"),
        K=as_K(a["K"]),
        temperature=as_number(a["temperature"], "--temperature"),
        top_k=as_optional(a["top_k"], as_whole_number, "--top_k", 1),
        top_p=as_optional(a["top_p"], as_number, "--top_p"),
        seed=as_whole_number(a["seed"], "--seed", 0, MAX_SEED),
        kv_cache=as_bool(a["kv_cache"], "--kv_cache"),
        models_dir=as_text(a["models_dir"], "--models_dir"),
        base_url=as_optional(a["base_url"], as_text, "--base_url"),
        download_retries=as_whole_number(a["download_retries"], "--download_retries", 0, MAX_DOWNLOAD_RETRIES),
        drafter=drafter,
        max_ngram=as_optional(a["max_ngram"], as_whole_number, "--max_ngram", 1),
        min_ngram=as_whole_number(a["min_ngram"], "--min_ngram", 1),
        tree=as_optional(a["tree"], as_tree),
        color=as_text(a["color"], "--color").strip().lower(),
        trace=as_bool(a["trace"], "--trace"),
        plot=as_optional(a["plot"], as_text, "--plot"),
        download_deadline=as_optional(a["download_deadline"], as_seconds, "--download_deadline"),
        r_table=as_optional(a["r_table"], as_text, "--r_table"),
        verbose=as_bool(a["verbose"], "--verbose"),
        plain=as_bool(a["plain"], "--plain"),
        html=as_optional(a["html"], as_text, "--html"),
    )
    if not flags.prompt:
        raise ValueError("--prompt is empty: give some text to continue")
    check_model_names(flags.draft_model_size, flags.target_model_size)
    check_sampling_flags(flags.temperature, flags.top_k, flags.top_p)
    if flags.max_ngram is not None and drafter == "model" or flags.min_ngram != 1 and drafter != "lookup":
        flag = "--max_ngram" if flags.max_ngram is not None and drafter == "model" else "--min_ngram"
        uses = "--drafter lookup or staged" if flag == "--max_ngram" else "--drafter lookup"
        raise ValueError(f"{flag} sets prompt lookup's matches, which only {uses} makes; got --drafter {drafter}: "
                         f"drop {flag}, or choose that drafter")
    if flags.max_ngram is not None and flags.min_ngram > flags.max_ngram:
        raise ValueError(f"--min_ngram {flags.min_ngram} is more than --max_ngram {flags.max_ngram}: prompt lookup "
                         f"counts a match as at most max_ngram tokens, and one shorter than min_ngram as none")
    if flags.r_table is not None:
        if flags.K != "auto" or flags.tree is not None:
            raise ValueError(f"--r_table gives the costs that --K auto plans with; got --K {flags.K}"
                             f"{' and a --tree' if flags.tree is not None else ''}: use --K auto, or drop --r_table")
        from speed import calibration  # here, not at the top: it imports sampling.py, and classroom.py's commands
        calibration.load_costs(flags.r_table)  # (these checks) must run where a student's copy does not parse yet
    if flags.tree is not None and drafter != "model":
        raise ValueError(f"--tree needs --drafter model (a tree's candidates are the draft model's top tokens); "
                         f"got --drafter {drafter}")
    if flags.color not in show.COLOR_MODES:
        raise ValueError(f"--color must be one of {', '.join(show.COLOR_MODES)}; got {shown(a['color'])}")
    names = [flags.target_model_size] + ([flags.draft_model_size] if flags.draft_model_size else [])
    check_base_url(flags.base_url)
    if flags.base_url is None and any(name in MODEL_SIZES for name in names):
        check_base_url(os.environ.get("GPT2_BASE_URL") or None, "$GPT2_BASE_URL")  # a released size may download
    if flags.download_deadline is None and not all(Path(name).is_dir() for name in names):
        download_deadline(None)  # a ValueError naming $GPT2_DOWNLOAD_DEADLINE unless it is seconds > 0 (or unset)
    check_models_dir(flags.models_dir)
    if flags.plot is not None:
        check_plot_path(flags.plot)
    if flags.html is not None:
        check_html_path(flags.html)
    if all(name in MODEL_SIZES or name in HUB_MODELS for name in names):  # all of them have n_ctx = 1024
        if flags.n_tokens_to_generate + 1 > RELEASED_N_CTX:  # a prompt has at least one token
            raise ValueError(
                f"--n_tokens_to_generate {flags.n_tokens_to_generate} plus the prompt is more than GPT-2's context "
                f"of {RELEASED_N_CTX} tokens: generate fewer tokens"
            )
        check_fits_context(flags, RELEASED_N_CTX, "GPT-2's context")
    return flags


# ------------------------------------------------------------------------------------------------------------
# Errors as one line
# ------------------------------------------------------------------------------------------------------------


@contextmanager
def errors_as_one_line():
    """Inside: the documented errors of bad input become one line `error: ...` on stderr and an exit code.

    DownloadError and CheckpointError (a broken download or file) exit with 1, and so does an OSError (a file
    that could not be read or written: the message names it); any other ValueError (a bad flag) exits with 2.
    Nothing else is caught: any other exception is a bug and keeps its traceback.
    """
    try:
        yield
    except (DownloadError, CheckpointError) as error:  # CheckpointError first: it is also a ValueError
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except OSError as error:
        print(f"error: {os_error_text(error)}", file=sys.stderr)
        raise SystemExit(1) from None
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


@contextmanager
def overflow_said_once():
    """Inside (the decoding): NumPy's warnings about an overflow are silenced. The weights were checked before
    (checks.check_weights_finite), so an overflow is a forward pass that overflowed on finite weights, and
    checks.py's checks (check_finite, check_probs) then raise a ValueError whose message says NaN, which every
    script's ending (command_line/scripts.ending_as_one_line) makes one `error:` line and exit code 1."""
    with np.errstate(over="ignore", invalid="ignore"):
        yield
