"""The gradebook's child: call a submission's functions on the cases it is given and write down what they return.

Read course/hidden.py first (why the gradebook decides in its own process, on cases drawn when it grades).

    python -m course.probe REQUEST.json ANSWERS.json        (in the folder being graded, in its sandbox)

REQUEST holds one step's checks: for each, a kind (which function, called how) and its cases (the arguments,
and where the function calls another step's, that step's calls recorded from the reference, to replay:
course/replay.py). The probe imports the graded folder's own modules, calls the function on each case and
writes what came back, encoded as course/replay.py encodes arrays, one answer per case: {"out": value} or
{"error": "TypeName: message"} (one broken case does not hide the others; a check that runs past its share of the
step's time limit fails its remaining cases, and the next check runs: `check_deadlines`). It never sees an
expected value and decides nothing: the gradebook compares the answers with the reference's, in its own process.

The teacher's gradebook runs the same `observe` on the same request, with the teacher's modules (the reference):
what it writes is the expected answer. One code path calls both.
"""

import contextlib
import importlib
import json
import os
import signal
import sys
import time

import numpy as np

from course import replay

CHECKS_SHARE = 0.8  # of a step's time limit, for its checks (`check_deadlines`)


def module(name):
    """The graded folder's module `name` (imported when first needed: a step does not import another's file)."""
    return importlib.import_module(name)


@contextlib.contextmanager
def patched(name, stand_ins):
    """Inside: module `name`'s functions replaced by `stand_ins` ({function name: stand-in}), those it holds (a
    learner's `from sampling import _accept` puts a name in drafters too); restored after."""
    target = module(name)
    originals = {key: getattr(target, key) for key in stand_ins if hasattr(target, key)}
    for key in originals:
        setattr(target, key, stand_ins[key])
    try:
        yield target
    finally:
        for key, original in originals.items():
            setattr(target, key, original)


def as_ints(values):
    return [int(value) for value in values]


# --- one driver per kind: (case, shared) -> what the function gave -------------------------------------------


def layer_norm(case, shared):
    return module("gpt2").layer_norm(case["x"], case["g"], case["b"])


def attention(case, shared):
    return module("gpt2").attention(case["q"], case["k"], case["v"], case["mask"])


def causal_mask(case, shared):
    return module("gpt2").causal_mask(case["n_seq"], case["n_past"])


def tree_mask(case, shared):
    return module("gpt2").tree_mask(case["ancestors"], case["n_prefix"])


def mha(case, shared):
    """The output, and the cache's valid positions after the call (mha writes the new keys and values there)."""
    n_head, n_past, n_seq = shared["n_head"], case["n_past"], len(case["x"])
    kv = np.zeros((2, n_head, case["capacity"], case["kv_before"].shape[-1]), np.float32)
    kv[:, :, :n_past] = case["kv_before"]
    attn = shared["params"]["blocks"][case["block"]]["attn"]
    with patched("gpt2", {"attention": replay.attention_stand_in(shared["attention"])}) as gpt2:
        out = gpt2.mha(case["x"], **attn, n_head=n_head, kv=kv, n_past=n_past, mask=case["mask"])
    return [out, kv[:, :, : n_past + n_seq]]


def forward_pass(case, shared):
    """gpt2 on a saved pass's inputs and cache: the logits, and with a cache the present's keys, values and tree."""
    gpt2 = module("gpt2")
    stand_ins = {"layer_norm": replay.layer_norm_stand_in(shared["layer_norm"]),
                 "mha": replay.mha_stand_in(shared["mha"])}
    causal_mask, tree_mask = replay.mask_stand_ins(shared)
    stand_ins["causal_mask"] = causal_mask  # step 2's: replayed for step 12 too (a tree hangs after a chain)
    if shared["masks"]:
        stand_ins["tree_mask"] = tree_mask
    past = replay.saved_cache(gpt2.Cache, case["past_kv"], case["past_parents"], shared["hparams"]["n_ctx"])
    with patched("gpt2", stand_ins):
        result = gpt2.gpt2(case["inputs"], **shared["params"], n_head=shared["hparams"]["n_head"], past=past,
                           **case["kwargs"])
    if past is None:
        return [result]
    logits, present = result
    return [logits, present.kv, as_ints(present.parents)]


def bpe(case, shared):
    if "encoder" not in shared:  # read the files once per check
        shared["encoder"] = module("encoder").get_encoder("124M", shared["models_dir"])
    return list(shared["encoder"].bpe(case["token"]))


def logits_to_probs(case, shared):
    return module("model_fn").logits_to_probs(case["logits"], case["temperature"], case["top_k"], case["top_p"])


def accept(case, shared):
    """(kept, u) and the generator's next draw: it must have moved on by exactly the one draw."""
    rng = np.random.default_rng(case["seed"])
    kept, u = module("sampling")._accept(case["q_row"], case["p_row"], case["token"], rng)
    return [bool(kept), float(u), float(rng.random())]


def residual(case, shared):
    return module("sampling")._residual(case["q_row"].copy(), case["p_row"].copy())


def verify(case, shared):
    """One round verified, with _accept and _residual replayed from the reference's own calls in that round: a
    chain by sampling._verify_chain, a tree by drafters._verify_tree."""
    stand_ins = {"_accept": replay.accept_stand_in(case["accept_calls"]),
                 "_residual": replay.residual_stand_in(case["residual_calls"])}
    rng, parents = np.random.default_rng(case["seed"]), list(case["parents"])
    with patched("sampling", stand_ins) as sampling:
        if parents == sampling.chain_parents(len(parents)):
            tokens, origins, checks = sampling._verify_chain(list(case["tokens"]), case["rows"], case["q"], rng)
            rows = list(range(len(tokens)))  # a chain's written token t has the target's row t
        else:
            proposal = sampling.Proposal(tokens=list(case["tokens"]), parents=parents, rows=case["rows"])
            with patched("drafters", stand_ins) as drafters:  # where it imported them by name
                tokens, origins, checks, rows = drafters._verify_tree(case["q"], proposal, rng, list(case["depths"]))
    return [as_ints(tokens), list(origins), as_ints(rows),
            [[int(c.depth), int(c.token), float(c.p), float(c.q), float(c.u), bool(c.kept)] for c in checks]]


def tokens_per_round(case, shared):
    return float(module("lookahead").tokens_per_round(case["alpha"], case["K"]))


def predicted_speedup(case, shared):
    return float(module("lookahead").predicted_speedup(case["alpha"], case["K"], c=case["c"], r=case["r"]))


def lookup(case, shared):
    """A text grown and cut back: after each change, lookup(x, 5), match_length(x) and the work counted so far."""
    found, x = module("drafters").prompt_lookup(case["max_ngram"], case["min_ngram"]), []
    answers = []
    for text in case["texts"]:
        x = x[: text["keep"]] + list(text["append"])
        tokens, n = as_ints(found.lookup(x, 5)), int(found.match_length(x))
        steps = getattr(getattr(found, "index", None), "steps", None)  # SuffixAutomaton's count of its work
        steps = steps if isinstance(steps, int) else repr(steps)[:20]
        answers.append({"lookup": tokens, "match length": n, "steps": steps})
    return answers


DRIVERS = {driver.__name__: driver for driver in (
    layer_norm, attention, causal_mask, tree_mask, mha, forward_pass, bpe, logits_to_probs, accept, residual, verify,
    tokens_per_round, predicted_speedup, lookup)}


class TimeUp(BaseException):
    """A check ran past its share of the step's time limit (a BaseException: a learner's `except Exception`
    does not swallow it)."""


def observe(request):
    """[[answer of each case] for each check of `request`] (decoded), each answer {"out": ...} or {"error": ...}.

    Where the request gives the step's time limit ("time_limit", as the gradebook's children get it), each
    check may run until the time left leaves every later check its equal share (`check_deadlines`): a check
    that never ends fails its remaining cases, and the checks after it still run in their own time."""
    answers, deadlines = [], check_deadlines(request)
    for check, deadline in zip(request["checks"], deadlines):
        driver, shared, found = DRIVERS[check["kind"]], dict(check.get("shared", {})), []
        try:
            with alarm_at(deadline):
                for case in check["cases"]:
                    found.append(answer(driver, case, shared))
        except TimeUp:  # the running case and the ones after it: late (the answers made before it stand)
            late = f"{TimeUp.__name__}: ran past its share of {request.get('time_text', 'the time limit')}"
            found += [{"error": late}] * (len(check["cases"]) - len(found))
        answers.append(found)
    return answers


def answer(driver, case, shared):
    """{"out": what driver returned for the case, encoded}, or {"error": "TypeName: message"}."""
    try:
        out = replay.encode(driver(case, shared))
        json.dumps(out)  # what cannot be written down (an object of the learner's) is an error here
        return {"out": out}
    except Exception as error:  # a learner's code may raise anything: it is this case's answer
        message = str(error).strip().splitlines()
        return {"error": f"{type(error).__name__}: {message[0][:200] if message else ''}"}


def check_deadlines(request, start=None):
    """The time.monotonic() by which each check of `request` must end: CHECKS_SHARE of the step's "time_limit"
    (none: no deadlines; the rest is for starting Python, before the gradebook ends the child) shared so that
    check i may use what is left but an equal share for each check after it. 3 checks in 9 s: the first ends
    by start + 3, the second by 6 (the time the first leaves goes to the second), the third by 9."""
    n = len(request["checks"])
    if request.get("time_limit") is None or not hasattr(signal, "setitimer"):  # the reference's run; Windows
        return [None] * n
    start = time.monotonic() if start is None else start
    share = CHECKS_SHARE * request["time_limit"] / max(n, 1)
    return [start + share * (i + 1) for i in range(n)]


@contextlib.contextmanager
def alarm_at(deadline):
    """Raise TimeUp in this (the main) thread at time.monotonic() `deadline`; None: no alarm."""
    if deadline is None:
        yield
        return

    def time_up(signum, frame):
        raise TimeUp()

    before = signal.signal(signal.SIGALRM, time_up)
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def main(request_path, answers_path):
    """Answer the request; or, for `classroom.py grade N` ({"pytest": [arguments]}), run the step's shipped
    tests with their JUnit report beside the answers. Either way the learner's code sees the same command line
    (sys.argv is the probe's alone), so what `grade N` shows is what the gradebook sees."""
    sys.argv[1:] = []
    with open(request_path, encoding="utf-8") as request:
        request = replay.decode(json.load(request))
    if "pytest" in request:
        import pytest  # only here: the gradebook's own requests never need it

        report = os.path.join(os.path.dirname(answers_path), "report.xml")
        raise SystemExit(pytest.main([*request["pytest"], f"--junitxml={report}"]))
    answers = observe(request)
    with open(answers_path, "w", encoding="utf-8") as out:
        json.dump(answers, out, separators=(",", ":"))


if __name__ == "__main__":
    main(*sys.argv[1:3])
