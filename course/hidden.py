"""The gradebook's checks: cases drawn fresh when it grades, answered by the submission, judged by the teacher.

Read course/replay.py, course/scenarios.py and course/probe.py first.

A learner's `grade N` runs the shipped checks (pytest in their own copy): quick and readable, and good enough
for practice. The gradebook cannot grade on them. A submission's code runs in the process that runs the
checks, so it can write any report it likes and exit 0; and the shipped cases and the reference's answers to
them are in every student copy (tests/fixtures/steps.json), so an answer can look them up instead of computing
them. So the gradebook, like nbgrader's hidden tests:
- draws its cases when it grades, from a seed no copy holds, by running course/scenarios.py and the small
  generators below on the teacher's reference (this process);
- sends the submission only the arguments (and, where its function calls another step's, the reference's calls
  of that step to replay), in a child that writes down what the function returned (course/probe.py);
- computes the reference's answers in its own process, by the same probe with the teacher's modules, and
  compares. Nothing the child says about itself counts: an answer is right only if it is the reference's.

Each step has one to three named checks of one point each (the gradebook counts them); a check passes when every one
of its cases matches. The reasons say where and how an answer differs (its shape, its dtype, the largest difference,
NaN), never the reference's value. Every check always holds its edge cases (a residual of total zero, ties in top-p,
scores near 200), whatever the seed: a re-grade with another seed gives the same code the same marks. Hiding the
teacher's files from a hand-in's code is the sandbox's work (course/sandbox.py).

The project's own files (gpt2.py, and sampling.py and drafters.py through course/scenarios.py) are imported where
checks are drawn, not at the top: classroom.py imports this file for every command, and in a student copy those
files are the student's, half written. A syntax error in one must not stop `hint`, `list` or `grade` (whose checks
run in a child, which reports it).
"""

import json
import os
import stat
from pathlib import Path

import numpy as np

from course import probe
from course import replay
from course.exercises import Check
from loaders import safe_files
from loaders.messages import printable

ANSWERS_CAP = 64 * 1024**2  # bytes of answers the gradebook reads back from a child
TOKENIZER_FILES = ("encoder.json", "vocab.bpe")  # what Encoder.bpe's checks read


def tokenizer_folder(repo):
    """The folder holding OpenAI's 124M tokenizer files where the tests look ($GPT2_MODELS_DIR/124M, then
    repo/models/124M, where `classroom.py tokenizer` puts them), or None."""
    named = [Path(os.environ["GPT2_MODELS_DIR"])] if os.environ.get("GPT2_MODELS_DIR") else []
    places = named + [Path(repo) / "models"]
    return next((place for place in places if all((place / "124M" / name).is_file() for name in TOKENIZER_FILES)),
                None)


def check(name, kind, cases, **shared):
    return {"name": name, "kind": kind, "cases": cases, "shared": shared}


def forward_checks(number, rng):
    """Steps 1-4 and 12: the scenarios of course/scenarios.py on a fresh tiny GPT-2, and fresh masks."""
    import gpt2  # the project's own files: imported here, not at the top (see the module docstring)
    from course import scenarios

    forward = scenarios.forward_part(int(rng.integers(2**31)))
    keep = lambda calls, *keys: [{key: call[key] for key in keys} for call in calls]  # noqa: E731 (no answers)
    if number == 1:
        return [check("layer_norm on the rows of a fresh tiny GPT-2's passes", "layer_norm",
                      keep(forward["layer_norm"], "x", "g", "b"))]
    if number == 2:
        near_200 = []
        for n_past in (0, 3):  # every score about 200: exp(200) overflows unless the max is subtracted first
            q = np.float32(10) + rng.random((2, 2, 4), dtype=np.float32)
            k = np.float32(10) + rng.random((2, n_past + 2, 4), dtype=np.float32)
            v = rng.standard_normal((2, n_past + 2, 4), dtype=np.float32)
            near_200.append({"q": q, "k": k, "v": v, "mask": gpt2.causal_mask(2, n_past)})
        sizes = [(int(rng.integers(1, 13)), int(rng.integers(0, 13))) for _ in range(12)]
        return [check("attention in a fresh tiny GPT-2's passes", "attention",
                      keep(forward["attention"], "q", "k", "v", "mask")),
                check("attention at scores near 200 (a softmax safe from overflow)", "attention", near_200),
                check("causal_mask of fresh sizes", "causal_mask", [{"n_seq": s, "n_past": p} for s, p in sizes])]
    if number == 3:
        return [check("mha on a fresh tiny GPT-2's caches", "mha",
                      keep(forward["mha"], "x", "block", "n_past", "mask", "capacity", "kv_before"),
                      params=forward["params"], n_head=forward["hparams"]["n_head"], attention=forward["attention"])]
    trees = number == 12
    passes = [run for run in forward["passes"] if ("tree" in run["name"]) == trees]
    stand_ins = {name: forward[name] for name in ("layer_norm", "mha", "causal_mask", "tree_mask")}
    passes_check = check(f"gpt2's {'tree pass' if trees else 'plain passes'} on a fresh tiny GPT-2", "forward_pass",
                         keep(passes, "inputs", "kwargs", "past_kv", "past_parents"), params=forward["params"],
                         hparams=forward["hparams"], masks=not trees, **stand_ins)
    if not trees:
        return [passes_check]
    masks = []
    for _ in range(10):
        parents = [int(rng.integers(-1, i)) for i in range(int(rng.integers(1, 8)))]
        n_seq = int(rng.integers(1, len(parents) + 1))
        masks.append({"ancestors": gpt2.tree_ancestors(parents)[-n_seq:], "n_prefix": int(rng.integers(0, 5))})
    return [check("tree_mask of fresh trees", "tree_mask", masks), passes_check]


def bpe_checks(rng, models_dir):
    """Step 5: fresh words made of two or three pieces of the vocabulary, and of random bytes."""
    vocabulary = sorted(piece for piece in json.loads((Path(models_dir) / "124M" / "encoder.json").read_text(
        encoding="utf-8")) if len(piece) <= 8)  # the longest pieces (runs of 64 dashes) make words slow to merge
    byte_characters = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(0x100, 0x143)]
    words = ["".join(vocabulary[i] for i in rng.integers(0, len(vocabulary), int(rng.integers(2, 4))))
             for _ in range(40)]
    words += ["".join(rng.choice(byte_characters, int(rng.integers(1, 9)))) for _ in range(20)]
    return [check("bpe of fresh words", "bpe", [{"token": word} for word in words], models_dir=str(models_dir))]


def top_p_checks(rng):
    """Step 6: fresh logits, ties among them, fresh top_p (with and without top_k) and temperatures."""
    cases = []
    for _ in range(16):
        logits = rng.standard_normal((int(rng.integers(1, 4)), int(rng.integers(4, 40))), dtype=np.float32)
        logits[:, 1] = logits[:, 0]  # a tie
        cases.append({"logits": logits, "temperature": float(rng.choice([0.7, 1.0, 1.3])),
                      "top_k": int(rng.integers(2, 6)) if rng.random() < 0.3 else None,
                      "top_p": float(rng.uniform(0.05, 0.99))})
    return [check("logits_to_probs with fresh top_p", "logits_to_probs", cases)]


def round_checks(number, rng):
    """Steps 7-9 and 13: fresh rows, seeds, rounds and texts."""
    from course import scenarios  # it imports sampling and drafters (see the module docstring)

    if number == 7:
        cases = []
        for _ in range(40):
            q_row, p_row = scenarios.random_row(rng, 5), scenarios.random_row(rng, 5)
            token = int(rng.choice(5, p=p_row))
            cases.append({"q_row": q_row, "p_row": p_row, "token": token, "seed": int(rng.integers(2**31))})
        return [check("_accept on fresh rows and seeds", "accept", cases)]
    rounds = scenarios.rounds_part(int(rng.integers(2**31)))
    if number == 8:  # always with the edge: equal rows, whose residual has a total of 0 (one-hot and spread)
        equal = [scenarios.random_row(rng, 6) for _ in range(2)] + [np.eye(6)[int(rng.integers(6))]]
        return [check("_residual of fresh rows", "residual",
                      [{"q_row": call["q_row"], "p_row": call["p_row"]} for call in rounds["residual"]]
                      + [{"q_row": row, "p_row": row.copy()} for row in equal])]
    if number == 9:
        keys = ("q", "tokens", "parents", "rows", "depths", "seed", "accept_calls", "residual_calls")
        cases = [{key: case[key] for key in keys} for case in rounds["verify"]]
        is_tree = lambda case: len(set(case["parents"])) < len(case["parents"])  # noqa: E731
        return [check("_verify_chain on fresh chains", "verify", [case for case in cases if not is_tree(case)]),
                check("_verify_tree on fresh trees", "verify", [case for case in cases if is_tree(case)])]
    return [check("prompt lookup on fresh texts", "lookup",
                  [{"max_ngram": setting["max_ngram"], "min_ngram": setting["min_ngram"],
                    "texts": [{"keep": text["keep"], "append": text["append"]} for text in setting["texts"]]}
                   for setting in rounds["lookup"]])]


def speedup_checks(rng):
    """Step 10: fresh alphas (0 and 1 among them), K, c and r."""
    alphas = [0.0, 1.0] + [float(a) for a in rng.uniform(0, 1, 10)]
    cases = [{"alpha": a, "K": int(rng.integers(1, 9)), "c": float(rng.uniform(0, 1)), "r": float(rng.uniform(1, 2))}
             for a in alphas]
    return [check("tokens_per_round", "tokens_per_round", cases),
            check("predicted_speedup", "predicted_speedup", cases)]


def request(number, seed, models_dir=None):
    """Step `number`'s checks, with cases drawn from `seed` (the same seed, the same cases)."""
    rng = np.random.default_rng([seed, number])
    if number in (1, 2, 3, 4, 12):
        checks = forward_checks(number, rng)
    elif number == 5:
        checks = bpe_checks(rng, models_dir)
    elif number == 6:
        checks = top_p_checks(rng)
    elif number == 10:
        checks = speedup_checks(rng)
    else:
        checks = round_checks(number, rng)
    return {"step": number, "checks": checks}


def through_json(value):
    """`value` written down and read back, as a child's answers are: both sides compared in the same form."""
    return replay.decode(json.loads(json.dumps(replay.encode(value))))


def expected_answers(step_request):
    """The reference's answers to a request: the probe run here, in the teacher's process, on the teacher's modules."""
    answers = through_json(probe.observe(step_request))
    failed = [case["error"] for check in answers for case in check if "error" in case]
    if failed:
        raise RuntimeError(f"the reference fails its own step {step_request['step']}: {failed[0]}")
    return answers


def read_answers(path):
    """A child's answers, decoded; ValueError when missing, not a regular file, too large or malformed. Read
    never through a link nor a pipe, and only as numbers (ints within 64 bits), arrays, texts and
    lists and dicts of them: nothing a hand-in writes can overflow, hang or raise in the comparison."""
    try:
        with os.fdopen(os.open(path, safe_files.READ_NO_LINK), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise ValueError("its answers are not a regular file")
            data = file.read(ANSWERS_CAP + 1)
    except FileNotFoundError:
        raise ValueError("it wrote no answers") from None
    except OSError as error:  # a link (ELOOP), a folder: not answers
        raise ValueError(f"its answers could not be read ({error.strerror})") from None
    if not data:  # the gradebook makes the file empty: the child never wrote it
        raise ValueError("it wrote no answers")
    if len(data) > ANSWERS_CAP:
        raise ValueError(f"its answers are larger than {ANSWERS_CAP // 1024**2} MB")
    try:
        return replay.decode(plain(json.loads(data.decode("utf-8"))))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as error:  # bad data: json's, decode's
        raise ValueError(f"its answers could not be read ({type(error).__name__})") from None


def plain(value, depth=0):
    """`value` (parsed JSON) if it is only what answers hold, else ValueError: None, booleans, ints of at most
    64 bits, floats, texts, and lists and dicts of them, nested at most 32 deep (a text is made printable
    where it is shown: loaders/messages.printable)."""
    if depth > 32:
        raise ValueError("nested too deep")
    if isinstance(value, list):
        return [plain(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {plain(key, depth + 1): plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, bool) or value is None or isinstance(value, (float, str)):
        return value
    if isinstance(value, int) and -2**63 <= value < 2**64:
        return value
    raise ValueError(f"a {type(value).__name__} out of range")


def difference(got, expected):
    """"" if `got` is the reference's answer `expected`, else what differs, without the reference's value."""
    if isinstance(expected, np.ndarray):
        if not isinstance(got, np.ndarray):
            return f"a {type(got).__name__} where an array is expected"
        if got.shape != expected.shape:
            return f"shape {got.shape}, expected {expected.shape}"
        if got.dtype != expected.dtype:
            return f"dtype {got.dtype}, expected {expected.dtype}"
        if expected.dtype.kind in "biu":
            return "" if np.array_equal(got, expected) else f"{int((got != expected).sum())} entries differ"
        if np.isnan(got).any() and not np.isnan(expected).any():
            return "NaN where the reference is finite"
        if not np.allclose(got, expected, rtol=1e-4, atol=1e-5):
            return f"largest difference {np.nanmax(np.abs(got - expected)):.3g} from the reference"
        return ""
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return f"{len(got) if isinstance(got, list) else 'not a list of'} items, expected {len(expected)}"
        return next((f"item {i}: {d}" for i, d in enumerate(map(difference, got, expected)) if d), "")
    if isinstance(expected, dict):  # named parts of an answer: the first that differs, by its name
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"not the parts {', '.join(expected)}"
        return next((f"its {key}: {d}" for key in expected if (d := difference(got[key], expected[key]))), "")
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return "" if np.isclose(got, expected, rtol=1e-6, atol=1e-9) else "a different number"
    return "" if type(got) is type(expected) and got == expected else "a different value"


def judge(step_request, expected, answers):
    """[Check] of a step: each check passes when every case's answer is the reference's."""
    checks = []
    for i, spec in enumerate(step_request["checks"]):
        got = answers[i] if isinstance(answers, list) and i < len(answers) else None
        reason = "" if isinstance(got, list) and len(got) == len(expected[i]) else "no answer for its cases"
        for j, (answer, reference) in enumerate(zip(got if not reason else [], expected[i])):
            if not isinstance(answer, dict) or ("out" not in answer and "error" not in answer):
                reason = f"case {j + 1}: a malformed answer"
            elif "error" in answer:
                reason = f"case {j + 1} of {len(expected[i])}: {printable(answer['error'])}"
            else:
                found = difference(answer["out"], reference["out"])
                reason = f"case {j + 1} of {len(expected[i])}: {found}" if found else ""
            if reason:
                break
        checks.append(Check(spec["name"], not reason, reason))
    return checks
