"""calibration.calibrate, save_costs, load_costs: the costs K="auto" plans with, measured on the machine that runs.

Read lookahead.py (calibrate, the costs file) first: these tests are its specification.

No timing is asserted: the clock is replaced by one that the fake models advance by a known amount per call,
so r(m) and c come out exactly as the fake costs say, and a wrong ratio (say, times not divided by the
1-position pass) shows up as a wrong number.
"""

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO_ROOT

import drafters
import lookahead
from speed import calibration
from loaders.random_weights import random_params
from model_fn import create_model_fn
from sampling import speculative_sampling

TINY = {"n_vocab": 64, "n_ctx": 64, "n_embd": 8, "n_head": 2, "n_layer": 1}


class FakeClock:
    """time.perf_counter for lookahead: advanced only by the fake models."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_model(clock, seconds_of_m, n_vocab=64):
    """A model function that takes seconds_of_m(m) of the fake clock for a call with m rows."""

    def model(x, n=1):
        clock.now += seconds_of_m(n)
        return np.full((n, n_vocab), 1 / n_vocab)

    model.n_vocab, model.n_ctx = n_vocab, 64
    return model


def test_calibrate_gives_each_pass_over_the_one_position_pass_and_fills_the_rest_in_linearly(monkeypatch):
    """A target whose m-row pass takes 2 + m/2 seconds: r(m) = (2 + m/2) / 2.5, measured at CALIBRATION_MS and
    the same, being linear, in between; r(1) = 1. A draft step of 0.5 s: c = 0.5 / 2.5 = 0.2."""
    clock = FakeClock()
    monkeypatch.setattr(calibration.time, "perf_counter", clock)
    costs = calibration.calibrate(fake_model(clock, lambda m: 2 + m / 2), fake_model(clock, lambda m: 0.5), m_max=17,
                                repeats=3)
    assert costs.r_table == pytest.approx([(2 + m / 2) / 2.5 for m in range(1, 18)], abs=1e-3)
    assert sorted(costs.measured) == list(calibration.CALIBRATION_MS) and costs.c == pytest.approx(0.2)
    assert costs.target_step_ms == pytest.approx(2500)


def test_costs_from_seconds_pairs_each_pass_with_the_one_position_pass_of_its_own_round():
    """Three rounds of turns, the third slowed down by a burst of load: ratios 2/1, 3/1, 12/10, median 2 (the
    ratio of the medians, 3/1, would count the burst against m = 2 only). m = 3: 4x in every round. An m_max
    beyond the largest m timed keeps its last value (np.interp); the m between two timed ones are interpolated."""
    costs = calibration.costs_from_seconds({1: [1, 1, 10], 2: [2, 3, 12], 3: [4, 4, 40]}, draft_seconds=[0.5, 0.5, 5],
                                         m_max=4)
    assert costs.r_table == [1.0, 2.0, 4.0, 4.0] and costs.c == 0.5 and costs.target_step_ms == 1000
    assert calibration.costs_from_seconds({1: [1.0], 5: [3.0]}).r_table == [1.0, 1.5, 2.0, 2.5, 3.0]  # filled in


def test_a_pass_timed_faster_than_a_one_position_pass_is_planned_at_r_1():
    """A 2-position pass does all a 1-position pass does and more: r(2) = median(0.9, 0.8, 0.95) = 0.9 is noise
    (a neighbour slowed the one-position passes). Planned at 0.9, K = auto would propose after any match: a
    round with one guess kept with chance a writes 1 + a tokens for 0.9 + o steps, more than a plain step's 1
    for every a >= 0 when o < 0.1. So r_table says 1.0, and `measured` keeps the 0.9 as timed."""
    costs = calibration.costs_from_seconds({1: [1.0, 1.0, 1.0], 2: [0.9, 0.8, 0.95], 4: [1.2, 1.2, 1.2]})
    assert costs.measured[2] == 0.9 and costs.r_table == [1.0, 1.0, 1.1, 1.2]
    target = SimpleNamespace(r_table=costs.r_table, round_overhead=0.006)  # what calibration.use sets on a model
    auto = lookahead.AutoK(drafters.PromptLookup(), target, k_max=1)
    auto.kept[0], auto.checked[0], auto.prior_weight[0] = 0.0, 20.0, 0.0  # 20 one-token matches, none followed
    assert auto.expected_rate(1, n=1) < auto.expected_rate(0, n=1)  # a plain step: k = 0


def disturbed_model(clock, slow_calls):
    """A fake target whose m-row pass takes 1 + (m - 1) / 10 seconds, but whose one-position passes number
    `slow_calls` (counting every one-position call, the untimed ones first) take 3 s: a neighbour's burst."""
    calls = {"one": 0}

    def seconds_of_m(m):
        if m == 1:
            calls["one"] += 1
            return 3.0 if calls["one"] in slow_calls else 1.0
        return 1 + (m - 1) / 10

    model = fake_model(clock, seconds_of_m)
    model.calls = calls
    return model


def test_a_burst_that_slows_the_first_rounds_one_position_passes_is_outvoted_by_more_rounds(monkeypatch):
    """calibrate makes two untimed one-position calls, then one a round. Rounds 1-3 (calls 3-5) are slowed to
    3 s, so their r(2) is 1.1 / 3 = 0.37, below 1: 3 more rounds, quiet (1.1 each). The median over six is
    (0.37 + 1.1) / 2 = 0.73, still below 1: 3 more. Over nine rounds, six quiet, r(2) = 1.1 and r(17) = 2.6.
    With the first three rounds alone r(2) would be planned at 1.0 (floored), and r(4) too: rounds too cheap."""
    clock = FakeClock()
    monkeypatch.setattr(calibration.time, "perf_counter", clock)
    monkeypatch.setattr(calibration, "round_overhead_seconds", lambda n_vocab, dtype, prefix: 0.0)
    target = disturbed_model(clock, slow_calls={3, 4, 5})
    costs = calibration.calibrate(target, m_max=17, repeats=3)
    assert target.calls["one"] == 2 + 9  # the untimed two, then nine rounds
    assert costs.r_table[1] == pytest.approx(1.1) and costs.r_table[16] == pytest.approx(2.6)


def test_a_quiet_machine_is_timed_for_repeats_rounds_only(monkeypatch):
    """No pass over more positions comes out cheaper than a one-position pass: exactly `repeats` rounds."""
    clock = FakeClock()
    monkeypatch.setattr(calibration.time, "perf_counter", clock)
    monkeypatch.setattr(calibration, "round_overhead_seconds", lambda n_vocab, dtype, prefix: 0.0)
    target = disturbed_model(clock, slow_calls=set())
    costs = calibration.calibrate(target, m_max=17, repeats=3)
    assert target.calls["one"] == 2 + 3 and costs.r_table[1] == pytest.approx(1.1)


def test_costs_survive_a_file_and_a_given_table_gives_the_same_tokens_for_a_seed(tmp_path):
    """Calibrate a real (tiny) model, save, load: the same costs. Two runs of K="auto" with them and one seed
    write the same tokens (the plan depends on the table and the rounds only, not on the clock)."""
    params = random_params(TINY, np.random.default_rng(0))
    costs = calibration.calibrate(create_model_fn(params, TINY), m_max=9, repeats=1)
    path = calibration.save_costs(tmp_path / calibration.COSTS_FILE, costs)
    assert calibration.load_costs(path) == costs and not (tmp_path / "r_table.json.part").exists()
    texts = []
    for _ in range(2):
        target = create_model_fn(params, TINY)
        calibration.load_costs(path).use(target)
        assert target.r_table == costs.r_table
        prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
        texts.append(speculative_sampling(prompt, drafters.prompt_lookup(), target, 30, "auto", np.random.default_rng(5)))
    assert texts[0] == texts[1]


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read the costs file"),
    (json.dumps({"r_table": [2.0, 3.0]}), "r\\(1\\) = 1"),
    (json.dumps({"r_table": [1.0, -1.0]}), "positive numbers"),
    (json.dumps({"r_table": [1.0, 2.5], "c": "cheap"}), "c=.cheap."),
])
def test_a_bad_costs_file_is_a_value_error_saying_what_it_needs(tmp_path, content, message):
    path = tmp_path / "r_table.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        calibration.load_costs(path)


@pytest.mark.parametrize("fields, named", [
    ({"target": "1558M", "machine": "aarch64, 4 cores, aarch64"}, ["target '1558M'", "machine 'aarch64, 4 cores"]),
    ({"target": "models/1558M"}, ["target 'models/1558M'"]),
    ({"machine": "aarch64, 4 cores, aarch64"}, ["machine 'aarch64, 4 cores"]),
    ({"target": "124M", "draft": "355M"}, ["draft '355M' (this run: 'distilgpt2')"]),
])
def test_a_costs_file_of_another_model_or_machine_is_refused_in_one_line_naming_the_file_and_what_differs(
        tmp_path, fields, named):
    """r(m) and c belong to a target, a draft and a machine: a file measured for others would plan with another
    machine's costs without a word, so it is refused, saying what differs and what to do."""
    path = tmp_path / "r_table.json"
    path.write_text(json.dumps({"r_table": [1.0, 1.5], "c": 0.3, **fields}))
    with pytest.raises(ValueError) as refused:
        calibration.check_costs_fit(calibration.load_costs(path), path, "124M", "distilgpt2")
    message = str(refused.value)
    assert str(path) in message and "drop --r_table" in message and "\n" not in message, message
    assert all(name in message for name in named), message


def test_a_costs_file_of_this_model_and_machine_or_naming_neither_is_taken():
    """The same target by another spelling of its folder (models/124M, /abs/124M, 124M) is the same target; a file
    that names no model and no machine (written by hand) is taken as it is: there is nothing to compare."""
    ours = calibration.MeasuredCosts(r_table=[1.0, 1.5], target="124M", draft="", machine=calibration.this_machine())
    assert calibration.check_costs_fit(ours, "r_table.json", "/somewhere/models/124M", "distilgpt2") is ours
    by_hand = calibration.MeasuredCosts(r_table=[1.0, 1.5])
    assert calibration.check_costs_fit(by_hand, "r_table.json", "355M") is by_hand


def test_main_py_refuses_a_costs_file_of_another_model_before_it_loads_any(tmp_path):
    """The check comes before the models load: the target here is an empty folder, which loading would refuse
    with another error (after printing 'loading the target')."""
    target = tmp_path / "355M"
    target.mkdir()
    path = tmp_path / "r_table.json"
    path.write_text(json.dumps({"r_table": [1.0, 1.5], "target": "1558M", "machine": "aarch64, 4 cores, aarch64"}))
    done = subprocess.run([sys.executable, "main.py", "--target_model_size", str(target), "--drafter", "lookup",
                           "--K", "auto", "--r_table", str(path)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.startswith(f"error: the costs file {path} was measured for another target '1558M'")
    assert done.stderr.count("\n") == 1, done.stderr


def test_benchmark_text_refuses_a_costs_file_of_another_machine_as_main_py_does(tmp_path):
    """tools/benchmark_text.py --r_table plans K=auto with the file's costs: one of another machine is refused in
    one line before any model is made (it was taken without a word)."""
    path = tmp_path / "r_table.json"
    path.write_text(json.dumps({"r_table": [1.0, 1.07], "c": 0.3, "machine": "aarch64, 4 cores, aarch64"}))
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "benchmark_text.py"), "--r_table", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr.startswith("error: the costs file") and "drop --r_table" in run.stderr


# ------------------------------------------------------------------------------------------------------------
# o: what a proposing round costs beyond its pass, measured with r(m) and kept in the costs file
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overhead_seconds, o", [(0.25, 0.1), (-0.01, 0.0)])
def test_calibrate_gives_o_as_the_rounds_own_work_over_a_one_position_pass_never_below_0(
        monkeypatch, overhead_seconds, o):
    """A round's own work 0.25 s beyond a plain step's, a one-position pass of 2.5 s: o = 0.1 target steps. A
    machine where the difference is timed as negative (noise: the rounds cost the same) plans with 0."""
    clock = FakeClock()
    monkeypatch.setattr(calibration.time, "perf_counter", clock)
    monkeypatch.setattr(calibration, "round_overhead_seconds", lambda n_vocab, dtype, prefix: overhead_seconds)
    costs = calibration.calibrate(fake_model(clock, lambda m: 2 + m / 2), m_max=3, repeats=3)
    assert costs.round_overhead == pytest.approx(o) and costs.target_step_ms == pytest.approx(2500)
    assert f"; o = {o:.3f} (a 1-position target pass: 2500.0 ms)" in costs.summary()


def test_o_is_timed_on_rounds_that_propose_one_guess_against_as_many_plain_steps_with_no_pass_in_them(monkeypatch):
    """round_overhead_seconds times the sampler itself: OVERHEAD_ROUNDS rounds of one guess (the last round of
    the run, with one token left, proposes nothing) against OVERHEAD_ROUNDS + 1 plain steps, with a target of
    rows made once, in the model's dtype. A clock that moves 3 s per round and 2 s per plain step: o's
    numerator is (33 * 3 - 33 * 2) / 32 seconds."""
    clock, rounds, passes = FakeClock(), [], []
    monkeypatch.setattr(calibration.time, "perf_counter", clock)

    def counted(stream, seconds, log):
        def wrapped(x, *args, **kwargs):
            for item in stream(x, *args, **kwargs):
                clock.now += seconds
                log.append(item)
                yield item
        return wrapped

    monkeypatch.setattr(calibration, "speculative_stream", counted(calibration.speculative_stream, 3.0, rounds))
    monkeypatch.setattr(calibration, "autoregressive_stream", counted(calibration.autoregressive_stream, 2.0, passes))
    seconds = calibration.round_overhead_seconds(64, np.float32, [1, 2, 3])
    n = calibration.OVERHEAD_ROUNDS
    assert seconds == pytest.approx((n + 1) * (3 - 2) / n) and len(rounds) == len(passes) == n + 1
    assert [len(round_.proposal.tokens) for round_ in rounds] == [1] * n + [0]
    assert [round_.origins[-1] for round_ in rounds] == ["residual" if not round_.checks[0].kept else "bonus"
                                                        for round_ in rounds[:n]] + ["bonus"]


def test_o_survives_the_costs_file_and_use_gives_it_to_the_target(tmp_path):
    """save, load, use: target.round_overhead = o, which K="auto" plans with. A file without o (written before
    o was measured, or by hand) loads with None, and use() leaves the target's own o alone."""
    costs = calibration.MeasuredCosts(r_table=[1.0, 1.07], round_overhead=0.0123)
    loaded = calibration.load_costs(calibration.save_costs(tmp_path / calibration.COSTS_FILE, costs))
    target = fake_model(FakeClock(), lambda m: 1.0)
    loaded.use(target)
    assert loaded == costs and target.round_overhead == 0.0123
    assert lookahead.AutoK(drafters.prompt_lookup(), target, k_max=4).overhead == 0.0123
    older = tmp_path / "older.json"
    older.write_text(json.dumps({"r_table": [1.0, 1.07], "c": None}))
    other = fake_model(FakeClock(), lambda m: 1.0)
    calibration.load_costs(older).use(other)
    assert calibration.load_costs(older).round_overhead is None and not hasattr(other, "round_overhead")


@pytest.mark.parametrize("overhead", [-0.01, "small", True, 10**30, [0.1]])
def test_a_costs_file_whose_o_is_not_a_number_from_0_is_a_value_error_naming_it(tmp_path, overhead):
    path = tmp_path / "r_table.json"
    path.write_text(json.dumps({"r_table": [1.0, 1.07], "round_overhead": overhead}))
    with pytest.raises(ValueError, match=r'"round_overhead" \(o, in target steps\) must be a number from 0 to 1e\+06, '
                                         r"or null \(not measured\); got round_overhead="):
        calibration.load_costs(path)
