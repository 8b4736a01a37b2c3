"""r(m), c and o timed on the machine that runs, and the costs file that keeps them for later runs.

Read lookahead.py first: K="auto" plans each round with a cost model whose r(m) (a target pass over m new
positions, in one-position passes), c (one draft step, in target steps) and o (what a proposing round costs
beyond its pass) are properties of this machine and these models, not of the algorithm. `calibrate` times them
in a few seconds before a run; `save_costs` writes them next to the model (COSTS_FILE) and `load_costs` reads
such a file back, refusing a damaged or hostile one with a one-line ValueError. main.py calibrates (or loads
--r_table) before its timed runs; tools/pass_parts.py and docs/BENCHMARKS.md show what calibrate measures here.
"""

import json
import re
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lookahead import AUTO_K_MAX
from records import AutoregressiveStats, SpeculativeStats
from sampling import Proposal, autoregressive_stream, speculative_stream
from speed import routes as product_routes
from loaders.safe_files import write_atomically
from loaders.messages import shown
from loaders.weights import read_small_json


# the m whose r(m) is timed; the m between are interpolated. r(m) is no straight line (a product kernel works
# rows in blocks: 8 rows measured about what 7 cost, 9 a tenth more), so the lengths the README and
# docs/BENCHMARKS.md quote, 2, 4, 8 and 16, are timed, not interpolated.
CALIBRATION_MS = (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17)
CALIBRATION_PREFIX = 512  # the cached tokens each timed pass comes after
COSTS_FILE = "r_table.json"  # the name of the costs file written next to a model
OVERHEAD_ROUNDS = 32  # the rounds (and plain steps) of each timing of o: a small fraction of a second
MORE_ROUNDS = 2  # on a noisy machine, up to this many times `repeats` more rounds of turns (`calibrate`)


@dataclass
class MeasuredCosts:
    """What `calibrate` measured: r(m) for m = 1 .. len(r_table), c for a draft model (None without one), o.

    r_table[m - 1] = r(m): the time of a target pass over m new positions over that of a 1-position pass
    (medians), timed for the m of `measured` and interpolated linearly between them. c: one draft step over
    one target step. round_overhead: o, what a round proposing a guess costs beyond its pass, in target steps
    (`round_overhead`; None: not measured, lookahead.ROUND_OVERHEAD is planned with). target_step_ms: the
    median 1-position target pass. Set them on the models with `use`.
    """

    r_table: list
    c: object = None  # float or None
    round_overhead: object = None  # o: float or None
    measured: dict = field(default_factory=dict)  # {m: r(m)} as timed
    target_step_ms: float = 0.0
    target: str = ""  # the names of the models, for whoever reads the file
    draft: str = ""
    machine: str = ""
    routes: dict = field(default_factory=dict)  # {kind: [route for m = 1 ..]}: speed/routes.py's choice
    routes_for: str = ""  # the fingerprint of the machine they were chosen on (speed/routes.fingerprint)

    def use(self, target_model=None, draft_model=None):
        """Give K="auto" these costs: target_model.r_table, target_model.round_overhead if o was measured, and
        draft_model.cost if c was; and take the routes chosen with them where they were chosen on a machine of
        this fingerprint (the same products, bit for bit, as the run that chose them)."""
        if target_model is not None:
            target_model.r_table = list(self.r_table)
            if self.round_overhead is not None:
                target_model.round_overhead = self.round_overhead
            if self.routes and self.routes_for == product_routes.fingerprint():
                product_routes.use(self.routes)
        if draft_model is not None and self.c is not None:
            draft_model.cost = self.c

    def summary(self):
        """One line: 'r(m), m = 1..17: 1.00 2.61 ...; c = 0.36; o = 0.012 (a 1-position target pass: 31.2 ms)'."""
        r = " ".join(f"{value:.2f}" for value in self.r_table)
        c = "" if self.c is None else f"; c = {self.c:.2f}"
        c += "" if self.round_overhead is None else f"; o = {self.round_overhead:.3f}"
        routes = f"; routes: {product_routes.text(self.routes)}" if self.routes else ""
        return (f"r(m), m = 1..{len(self.r_table)}: {r}{c} (a 1-position target pass: {self.target_step_ms:.1f} ms)"
                f"{routes}")


def calibrate(target_model, draft_model=None, m_max=AUTO_K_MAX + 1, repeats=3, prefix=None, ms=CALIBRATION_MS,
              routes=None):
    """Measure r(m) for m = 1 .. m_max, o (and c with a draft model) on this machine: a MeasuredCosts.

    First the route of each product (speed/routes.py: a few seconds, on the matrices of the passes that put the
    prefix in the cache), unless `routes` gives them ({kind: [route for m = 1 ..]}, as a costs file holds them);
    r(m) is then timed with those routes, which the costs keep.

    A few seconds, untimed by the callers: each of `ms` (those <= m_max, and m_max) is timed `repeats` times, in
    turns, so that a burst of load on a shared machine hits them alike; r(m) is the median over the rounds of
    turns of time(m) / time(1) in the same round, c the same for the draft's step. Where some pass over more
    positions comes out cheaper than a one-position pass (the mark of a noisy machine: a neighbour slowed the
    one-position passes), `repeats` more rounds are timed, up to MORE_ROUNDS times, and the medians taken over
    every round: one disturbed stretch then outvoted, r(m) is not planned too low. Each pass comes after the
    same prefix (the model function rolls its cache back to it; default CALIBRATION_PREFIX tokens, about the
    context a decoding run works at, since the attention over the cache is part of every pass): the
    target's pass over m positions, target_model(prefix + m tokens, m), as a round with m - 1 guesses makes it;
    the draft's one-position step, draft_model(prefix + 1 token, 1). Any token ids do: the cost is the same.
    o comes last (`round_overhead`, a fraction of a second), in turns with the target passes' own repeats.
    The model functions' caches and statistics are changed: calibrate the warm-up models, not the timed ones.
    """
    if isinstance(m_max, bool) or not isinstance(m_max, (int, np.integer)) or m_max < 1:
        raise ValueError(f"m_max must be a whole number >= 1; got {m_max!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
        raise ValueError(f"repeats must be a whole number >= 1; got {repeats!r}")
    n_vocab = getattr(target_model, "n_vocab", None) or 50257
    n_ctx = getattr(target_model, "n_ctx", None) or 1024
    if prefix is None:  # CALIBRATION_PREFIX tokens, or fewer in a context too small for them + m_max
        prefix = [i % n_vocab for i in range(max(1, min(CALIBRATION_PREFIX, n_ctx - m_max)))]
    prefix = [int(token) for token in prefix]
    tokens = prefix + [(7 * i + 3) % n_vocab for i in range(m_max)]
    if len(tokens) > n_ctx:
        raise ValueError(f"calibrating needs {len(prefix)} + {m_max} positions, more than n_ctx={n_ctx}")
    ms = sorted({m for m in ms if 1 <= m <= m_max} | {1, m_max})
    seconds = {m: [] for m in ms}
    draft_seconds = []
    target_model(tokens[: len(prefix) + 1], 1)  # the prefix into the cache: not timed
    if draft_model is not None:
        draft_model(tokens[: len(prefix) + 1], 1)
    rows = target_model(tokens[: len(prefix) + 1], 1)  # a one-position pass too: every product's kind met, m = 1
    if routes is None:
        routes = product_routes.choose()  # {} when no product was big enough to have a route of its own
    else:
        product_routes.use(routes)
    overhead_seconds = []

    def rounds_of_turns(count):
        for _ in range(count):
            for m in ms:
                seconds[m].append(_seconds(lambda: target_model(tokens[: len(prefix) + m], m)))
            if draft_model is not None:
                draft_seconds.append(_seconds(lambda: draft_model(tokens[: len(prefix) + 1], 1)))
            overhead_seconds.append(round_overhead_seconds(np.shape(rows)[-1], np.asarray(rows).dtype, prefix))

    rounds_of_turns(repeats)
    for _ in range(MORE_ROUNDS):  # a pass over more positions timed cheaper than one: noise, so time more rounds
        if min(median_ratios(seconds).values()) >= 1:
            break
        rounds_of_turns(repeats)
    costs = costs_from_seconds(seconds, draft_seconds if draft_model is not None else None, m_max)
    costs.round_overhead = round(max(0.0, float(np.median(overhead_seconds) / np.median(seconds[1]))), 4)
    costs.machine = this_machine()
    costs.routes, costs.routes_for = routes, product_routes.fingerprint() if routes else ""
    return costs


def round_overhead_seconds(n_vocab, dtype, prefix, rounds=OVERHEAD_ROUNDS):
    """What a round proposing one guess costs beyond its target pass, over what a plain step costs beyond its
    own, in seconds: o's numerator (`calibrate` divides by a one-position pass).

    The sampler's own work is timed, nothing else: `rounds` rounds of speculative_stream (K = 1, a guess the
    target rejects: a lookup's guess on prose) against as many steps of autoregressive_stream, both counted in
    stats as a run counts them, both with a target that gives back rows made once ([m, n_vocab] of the
    model's dtype, uniform), so its pass costs nothing. What is left is what surrounds a pass: a proposal and
    its row, m = 2 rows checked, Steps 3-4 (a rejection: the residual, a draw), the Round recorded. Example:
    if the rounds took 1.2 times as long as the plain steps, and a plain step's work was a hundredth of a
    one-position pass, o = 0.2 * 0.01 = 0.002 target steps.
    """
    made = {m: np.full((m, n_vocab), 1 / n_vocab, dtype=dtype) for m in (1, 2)}  # [m, n_vocab]

    def target(x, n=1):
        return made[n]

    target.n_vocab = n_vocab
    rng = np.random.default_rng(0)
    proposing = _seconds(lambda: sum(1 for _ in speculative_stream(
        prefix, OneGuess(), target, rounds + 1, 1, rng, stats=SpeculativeStats())))  # the last round: k = 0
    plain = _seconds(lambda: sum(1 for _ in autoregressive_stream(prefix, target, rounds + 1, rng,
                                                                   stats=AutoregressiveStats())))
    return (proposing - plain) / rounds


class OneGuess:
    """A drafter that guesses token 0 from a one-hot row, as a lookup guesses: a uniform target keeps it with
    chance 1 / n_vocab (round_overhead_seconds times the rounds whose guess fails)."""

    def propose(self, x, k, rng, n_vocab):
        rows = np.zeros((1, n_vocab))  # [1, n_vocab]
        rows[0, 0] = 1.0
        return Proposal(tokens=[0], parents=[-1], rows=rows)


def this_machine():
    """The machine in a few words, as a costs file records it: 'x86_64, 2 cores, x86_64'."""
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.system()}"


def check_costs_fit(costs, path, target, draft=None):
    """A ValueError in one line if the costs loaded from path were measured for another target model (by its
    name: 355M, a folder .../355M and openai-community/gpt2-medium's last part compare as their last part), another
    draft model, or on another machine (`this_machine`): r(m) and c are properties of both, so K="auto" would plan
    with another machine's costs. A file that names none of them (written by hand) is taken as it is."""
    run = {"target": target, "draft": draft or "", "machine": this_machine()}
    wrong = [f"{name} {getattr(costs, name)!r} (this run: {run[name]!r})" for name in run
             if getattr(costs, name) and run[name] and _last_part(getattr(costs, name)) != _last_part(run[name])]
    if wrong:
        raise ValueError(f"the costs file {path} was measured for another {', '.join(wrong)}: drop --r_table to "
                         f"measure them on this run (--K auto keeps them in {COSTS_FILE} next to the target model)")
    return costs


def _last_part(name):
    """'355M' for 'models/355M/' or '355M'; a machine's description as it is."""
    return Path(name).name if "," not in name else name


def costs_from_seconds(seconds, draft_seconds=None, m_max=None):
    """A MeasuredCosts from pass times: seconds[m][j] is the j-th time of an m-position target pass (m = 1 among
    them), draft_seconds[j] of a one-position draft step, j counting rounds of turns. r(m) is the median over
    the rounds of seconds[m][j] / seconds[1][j]; the m up to m_max (default: the largest) that were not timed
    are interpolated linearly. tools/benchmark_forward.py's r(m) times (pass_seconds) are of this form.

    r(m) is planned with at 1 or more: a pass over m positions reads every weight and the whole cache, as a
    one-position pass does, and multiplies more rows. A median below 1 is a shared machine's noise (a
    one-position pass slowed by a neighbour in most rounds), and planning with it would make K = auto propose
    after every match, however rarely matches are followed: `measured` keeps it as timed, `r_table` takes 1.
    Example: seconds {1: [1.0, 1.0, 1.0], 2: [0.9, 0.8, 0.95]}: `measured` keeps 0.9 for m = 2, r_table 1.0."""
    ms = sorted(seconds)
    m_max = m_max or ms[-1]
    measured = median_ratios(seconds)
    r_table = np.interp(range(1, m_max + 1), ms, [max(1.0, measured[m]) for m in ms])  # [m_max], each >= 1
    c = None if draft_seconds is None else float(np.median(np.divide(draft_seconds, seconds[1])))
    return MeasuredCosts(
        r_table=[round(float(r), 3) for r in r_table],
        c=None if c is None else round(c, 4),
        measured={m: round(r, 3) for m, r in measured.items()},
        target_step_ms=round(1000 * float(np.median(seconds[1])), 3),
    )


def median_ratios(seconds):
    """{m: the median over the rounds of seconds[m][j] / seconds[1][j]}: each ratio within one round of turns
    (a burst of load longer than a round slows both), then the median. {1: [1, 2], 3: [2, 6]} gives {1: 1, 3: 2.5}."""
    return {m: float(np.median(np.divide(seconds[m], seconds[1]))) for m in sorted(seconds)}


def _seconds(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def save_costs(path, costs):
    """Write a MeasuredCosts as a small JSON file (safe_files.write_atomically: a fresh file of its own, then
    renamed: never half a file, never written through a link)."""
    path = Path(path)
    data = asdict(costs)
    data["measured"] = {str(m): r for m, r in costs.measured.items()}
    return write_atomically(path, json.dumps(data, indent=1) + "\n")


MAX_COSTS_BYTES = 64 << 10  # a costs file calibrate writes is about 1 KB
MAX_R_TABLE = 256  # r(m) for m up to 256: K="auto" reads up to AUTO_K_MAX + 1 of them
MAX_RATIO = 1e6  # r(m) and c are ratios of times: 1e6 is far beyond any machine, and keeps the planning finite
MAX_TEXT = 1_000  # characters of the names a costs file records (the models, the machine)


def load_costs(path):
    """The MeasuredCosts of a file that save_costs wrote, or a ValueError in one line naming the file and the field.

    Only a regular file of at most MAX_COSTS_BYTES is read (a named pipe would wait forever, /dev/zero fill the
    memory), and every field is checked, its type and its range, before anything uses it:
    r_table a list of 1 to MAX_R_TABLE numbers in (0, MAX_RATIO] starting with r(1) = 1; c and round_overhead
    (o; older files lack it) null or a number in [0, MAX_RATIO]; measured {"m": r(m)}; target_step_ms a number
    >= 0; target, draft, machine, routes_for text; routes as speed/routes.check takes them.
    """
    where = f"the costs file {path}"
    data = read_small_json(path, MAX_COSTS_BYTES, where, f"write one with speed.calibration.save_costs (main.py "
                           f"--K auto writes {COSTS_FILE} next to the target model)", parse_constant=_no_constant)
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a JSON object {{\"r_table\": [...], \"c\": ...}}; got a JSON "
                         f"{type(data).__name__}")
    r_table, c = data.get("r_table"), data.get("c")
    good_r = isinstance(r_table, list) and 1 <= len(r_table) <= MAX_R_TABLE
    if not (good_r and all(_is_number(r, above=0) for r in r_table) and r_table[0] == 1):
        raise ValueError(f"{where}: \"r_table\" must be [1.0, r(2), ...], 1 to {MAX_R_TABLE} positive numbers of "
                         f"at most {MAX_RATIO:g} (r(1) = 1); got {shown(r_table)}")
    if not (c is None or _is_number(c, at_least=0)):
        raise ValueError(f"{where}: \"c\" must be a number from 0 to {MAX_RATIO:g}, or null; got c={shown(c)}")
    overhead = data.get("round_overhead")  # o: a key older files do not have
    if not (overhead is None or _is_number(overhead, at_least=0)):
        raise ValueError(f"{where}: \"round_overhead\" (o, in target steps) must be a number from 0 to {MAX_RATIO:g}, "
                         f"or null (not measured); got round_overhead={shown(overhead)}")
    measured = data.get("measured", {})
    if not (isinstance(measured, dict) and len(measured) <= MAX_R_TABLE and all(
            isinstance(m, str) and re.fullmatch("[0-9]{1,3}", m) and 1 <= int(m) <= MAX_R_TABLE
            and _is_number(r, above=0)
            for m, r in measured.items())):
        raise ValueError(f"{where}: \"measured\" must be {{\"m\": r(m)}}, m from 1 to {MAX_R_TABLE}, r(m) a positive "
                         f"number of at most {MAX_RATIO:g}; got {shown(measured)}")
    if not _is_number(data.get("target_step_ms", 0.0), at_least=0, at_most=1e9):
        raise ValueError(f"{where}: \"target_step_ms\" must be a number of milliseconds >= 0; got "
                         f"{shown(data['target_step_ms'])}")
    for name in ("target", "draft", "machine", "routes_for"):
        if not (isinstance(data.get(name, ""), str) and len(data.get(name, "")) <= MAX_TEXT):
            raise ValueError(f"{where}: \"{name}\" must be text of at most {MAX_TEXT} characters; got "
                             f"{shown(data[name])}")
    routes = product_routes.check(data.get("routes", {}), where)
    known = {name: data[name] for name in ("target", "draft", "machine", "routes_for") if name in data}
    return MeasuredCosts(r_table=[float(r) for r in r_table], c=None if c is None else float(c),
                         round_overhead=None if overhead is None else float(overhead),
                         measured={int(m): float(r) for m, r in measured.items()},
                         target_step_ms=float(data.get("target_step_ms", 0.0)), routes=routes, **known)


def _no_constant(constant):
    raise ValueError(f"{constant} is not a number a costs file may hold")


def _is_number(value, above=None, at_least=None, at_most=MAX_RATIO):
    """value is an int or a float (not a bool) within the bounds: > above, >= at_least, <= at_most. An int of any
    size is compared as an int (np.isfinite would refuse one of 31 digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN != NaN
        return False
    return (above is None or value > above) and (at_least is None or value >= at_least) and value <= at_most
