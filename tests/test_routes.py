"""speed/routes.py and the routes of speed/products.py: every route is x @ w, and the fastest is the one taken.

Read speed/routes.py first. The reference is the product in float64; a float32 route may differ from it by
rounding only. For a sum of n products in float32, each partial sum is rounded once, so the computed entry
differs from the exact one by at most n · 2^-24 · Σ|x_i w_i| (the classic bound for recursive summation; a
blocked sum, as BLAS's kernels make, is bounded by the same). A wrong column or row is off by its size.
No test here reads a clock: the choice is tested on times given to it.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO_ROOT

from speed import calibration
from speed import products
from speed import routes

U32 = 2.0**-24  # float32's unit roundoff


def assert_rounding_of(y, x, w, what):
    """y is x @ w to float32 rounding: within n_in · 2^-24 · (|x| @ |w|) of the float64 product, entry by entry."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    exact = x64 @ w64
    bound = x.shape[-1] * U32 * (np.abs(x64) @ np.abs(w64))
    assert y.shape == exact.shape and y.dtype == np.float32, what
    excess = np.abs(y - exact) - bound
    assert excess.max() <= 0, f"{what}: off by {np.abs(y - exact).max():.3g}, beyond float32 rounding"


@pytest.fixture(scope="module")
def weights():
    """A block matrix [768, 3072] column-major and read-only, as the loaders keep it, and an LM head's wte
    [5000, 768] (multiplied as wte.T): both big enough for the helper process to share."""
    rng = np.random.default_rng(0)
    w = np.asfortranarray(rng.standard_normal((768, 3072), dtype=np.float32) * 0.02)
    wte = rng.standard_normal((5000, 768), dtype=np.float32) * 0.02
    for array in (w, wte):
        array.flags.writeable = False
    return w, wte


@pytest.mark.parametrize("route", products.ROUTES)
def test_every_route_of_a_weight_matrix_gives_x_times_w_for_every_m_a_round_uses(weights, route):
    """Each route, for a block matrix and the LM head, m = 1 .. M_MAX rows (and 24, the panels' last): x @ w
    to float32 rounding. The second call of a matrix is shared with the helper process, where one runs."""
    rng = np.random.default_rng(1)
    w, wte = weights
    for kind, matrix in (("blocks", w), ("head", wte.T)):
        assert products.kind_of(np.zeros((1, 768), np.float32), matrix) == kind
        x = rng.standard_normal((24, 768), dtype=np.float32)
        for m in [*range(1, routes.M_MAX + 1), 24]:
            for _ in range(2):
                assert_rounding_of(products.multiply(x[:m], matrix, route, kind), x[:m], matrix, f"{kind} {route} {m}")


@pytest.mark.parametrize("route", products.SCORE_ROUTES)
def test_every_route_of_attentions_scores_gives_q_times_k_transposed(route):
    """q [12, m, 64] @ k.T over 512 cached keys and the m new ones, k a view of a cache as gpt2.mha makes it:
    each scores route, m = 1 .. M_MAX, is q @ k.T to float32 rounding, and contiguous."""
    rng = np.random.default_rng(2)
    cache = rng.standard_normal((12, 600, 64), dtype=np.float32)
    q = rng.standard_normal((12, routes.M_MAX, 64), dtype=np.float32)
    for m in range(1, routes.M_MAX + 1):
        keys = cache[:, : 512 + m].transpose(0, 2, 1)  # [12, 64, 512 + m], a transposed view
        y = products.multiply(q[:, :m], keys, route, "scores")
        assert y.flags.c_contiguous, f"{route}, {m} queries"
        assert_rounding_of(y, q[:, :m], keys, f"{route}, {m} queries")


def test_a_padded_route_gives_the_rows_asked_for_and_takes_the_larger_ms_route(weights, monkeypatch):
    """3 rows 'padded to 4': a 4-row product with a zero row, by the route chosen for 4 rows, of which the 3
    asked for are returned; the scores the same, over a stack."""
    w, _ = weights
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 768), dtype=np.float32)
    monkeypatch.setattr(products, "_routes", {"blocks": ["panels", "vectors", "padded to 4", "halves"]})
    seen = []
    columns = products.columns
    monkeypatch.setattr(products, "columns", lambda x, w, b, e, out, how=0: seen.append((x.shape[0], how))
                        or columns(x, w, b, e, out, how))
    y = products.matmul(x, w)
    assert_rounding_of(y, x, w, "3 rows padded to 4")
    assert seen and all(call == (4, products.HOWS.index("halves")) for call in seen)
    q, k = rng.standard_normal((12, 3, 64), dtype=np.float32), rng.standard_normal((12, 515, 64), dtype=np.float32)
    scores = products.multiply(q, k.transpose(0, 2, 1), "padded to 4", "scores")
    assert_rounding_of(scores, q, k.transpose(0, 2, 1), "3 queries padded to 4")


def test_the_check_has_teeth_a_route_that_drops_a_rows_last_column_fails(weights, monkeypatch):
    """'vectors' that leaves each row's last column out (a slice one short) is caught by the same check."""
    w, _ = weights
    columns = products.columns

    def short(x, w, begin, end, out, how=0):
        columns(x, w, begin, end, out, how)
        out[:, -1] = 0.0

    monkeypatch.setattr(products, "columns", short)  # here: the helper's half, if one runs, stays right
    x = np.random.default_rng(4).standard_normal((2, 768), dtype=np.float32)
    with pytest.raises(AssertionError, match="beyond float32 rounding"):
        assert_rounding_of(products.multiply(x, w, "vectors", "blocks"), x, w, "a short route")


def test_vectors_gives_each_row_the_bits_of_its_own_one_row_product(weights):
    """m matrix-vector products are m one-row products: each row the same bits as that row alone."""
    w, _ = weights
    x = np.random.default_rng(5).standard_normal((5, 768), dtype=np.float32)
    together = products.multiply(x, w, "vectors", "blocks")
    for i in range(5):
        assert np.array_equal(together[i], products.multiply(x[i : i + 1], w, "vectors", "blocks")[0]), i


def test_the_choice_takes_the_fastest_keeps_the_default_within_noise_and_pads_to_a_faster_larger_m():
    """Times given, no clock: m = 1 the default (panels) within KEEP_DEFAULT of the fastest; m = 2 vectors,
    far faster than the rest; m = 3 slower by every route than m = 4's best, so padded to 4. A far larger m
    (9, for m = 4: more than PAD_MAX rows above) is never padded to, however fast it looked."""
    times = {"blocks": {1: {"panels": 1.02, "one call": 1.0},
                          2: {"panels": 2.5, "vectors": 1.7, "halves": 2.4, "one call": 2.6},
                          3: {"panels": 3.0, "vectors": 2.4, "halves": 2.9, "one call": 3.1},
                          4: {"panels": 2.0, "vectors": 3.0, "halves": 2.1, "one call": 2.2}},
               "scores": {1: {"turned round": 1.0, "plain": 1.0, "vectors": 1.0},
                          2: {"turned round": 2.0, "plain": 3.0, "vectors": 1.5}}}
    times["blocks"][9] = {"panels": 0.5, "vectors": 0.5, "halves": 0.5, "one call": 0.5}  # m = 4 + 5: too far to pad
    table = routes.chosen(times)
    del times["blocks"][9]
    assert table["blocks"][3] == "panels"
    table = routes.chosen(times)
    assert table == {"blocks": ["panels", "vectors", "padded to 4", "panels"], "scores": ["plain", "vectors"]}
    assert routes.check(table, "here") == table
    assert routes.text(table) == "blocks 1 panels, 2 vectors, 3 padded to 4, 4 panels; scores 1 plain, 2 vectors"


@pytest.mark.parametrize("table, message", [
    ({"blocks": ["panels", "sideways"]}, "for m = 2 must be one of"),
    ({"blocks": ["padded to 1", "panels"]}, "for m = 1 must be panels"),
    ({"blocks": ["padded to 3", "panels"]}, "for m = 1 must be panels"),
    ({"blocks": ["padded to 2", "padded to 2"]}, "for m = 1 must be panels"),
    ({"scores": ["panels"]}, "of scores for m = 1 must be one of"),
    ({"weights": ["panels"]}, "for kinds among"),
    ({"blocks": []}, "a list of 1 to 17 routes"),
])
def test_a_table_of_routes_that_names_no_route_is_refused_in_one_line(table, message):
    with pytest.raises(ValueError, match=message):
        routes.check(table, "the costs file x")


@pytest.mark.parametrize("table, message", [
    ({"blocks": ["panels"] + ["padded to 256"] * 255}, "of blocks must be a list of 1 to 17 routes.*got 256 routes"),
    ({"head": ["padded to 17"] * 17}, r"of head for m = 1 must be panels \(one row keeps the default route\)"),
    ({"scores": ["padded to 2", "plain"]}, "of scores for m = 1 must be one of turned round, plain, vectors; got"),
    ({"blocks": ["panels"] + ["padded to 17"] * 15 + ["panels"]}, "for m = 2 must be .* N from 3 to 5"),
    ({"blocks": ["panels", "padded to 3", "padded to 4", "vectors"]}, "for m = 2 must be"),
    ({"blocks": ["panels", "padded to \u00b2", "vectors"]}, "for m = 2 must be .*got 'padded to \u00b2'"),
    ({"blocks": ["panels", "padded to \u0663", "vectors"]}, "for m = 2 must be"),
])
def test_a_table_chosen_could_not_have_made_is_refused_naming_the_kind_and_the_m(table, message):
    """What a measurement can give, and nothing else: M_MAX rows at most (256 rows all padded to 256 decoded
    about 12 times slower), one row of a weight matrix on its default route, a padded row count only from m = 2
    to at most PAD_MAX rows more, that m's route direct, its digits ASCII ("²" and "٣" are digits to str.isdigit,
    which int() refuses or reads as 3)."""
    with pytest.raises(ValueError, match=message) as refused:
        routes.check(table, "the routes file x")
    assert str(refused.value).startswith("the routes file x: ") and "\n" not in str(refused.value)


def test_every_table_chosen_makes_passes_the_check():
    """The check's other half: whatever times are given, `chosen`'s table is taken (here, random times for every
    kind and every m up to M_MAX, which pad at random)."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        times = {kind: {m: {route: float(rng.uniform(0.5, 2.0)) * (m if rng.uniform() < 0.5 else 1)
                            for route in (products.SCORE_ROUTES if kind == "scores" else routes.candidates(kind, m))}
                        for m in range(1, routes.M_MAX + 1)} for kind in products.KINDS}
        table = routes.chosen(times)
        assert routes.check(table, "here") == table


def test_the_routes_survive_the_costs_file_and_are_taken_only_on_a_machine_of_the_same_fingerprint(tmp_path,
                                                                                                   monkeypatch):
    """save_costs writes the routes and their fingerprint; load_costs reads them back; use() takes them where the
    fingerprint is this machine's, and leaves the routes as they were where it is another's."""
    table = {"blocks": ["panels", "vectors", "padded to 4", "panels"]}
    costs = calibration.MeasuredCosts(r_table=[1.0, 1.5], routes=table, routes_for=routes.fingerprint())
    loaded = calibration.load_costs(calibration.save_costs(tmp_path / "r_table.json", costs))
    assert loaded.routes == table and loaded.routes_for == routes.fingerprint()
    assert "routes: blocks 1 panels, 2 vectors, 3 padded to 4, 4 panels" in loaded.summary()
    monkeypatch.setattr(products, "_routes", {})
    monkeypatch.setattr(routes.second_core, "_chosen", None)  # no count taken (a test before may have chosen one)
    monkeypatch.setattr(routes, "use", products.use_routes)  # no new helper needed for this check
    model = type("Model", (), {})()
    loaded.use(model)
    assert routes.current() == table
    products.use_routes({})
    loaded.routes_for = "NumPy 0.1, another BLAS, another processor"
    loaded.use(model)
    assert routes.current() == {}


def test_the_fingerprint_names_numpys_version_its_blas_and_the_processor(monkeypatch):
    """A change of NumPy's version changes the fingerprint (and so a saved choice is not used)."""
    before = routes.fingerprint()
    assert f"NumPy {np.__version__}" in before
    monkeypatch.setattr(np, "__version__", "9.9.9")
    assert routes.fingerprint() != before and "NumPy 9.9.9" in routes.fingerprint()


def test_the_fingerprint_names_the_cores_this_process_may_use(monkeypatch):
    """Routes chosen under `taskset -c 0` (one core: one BLAS call is a candidate there) are not taken on two."""
    monkeypatch.setattr(routes.second_core, "_cores", lambda: 1)
    one = routes.fingerprint()
    monkeypatch.setattr(routes.second_core, "_cores", lambda: 2)
    assert "1 core " in one and "2 cores " in routes.fingerprint() and one != routes.fingerprint()


def test_the_fingerprint_changes_with_the_code_of_a_route(monkeypatch):
    """A route's code rewritten (here `columns`, which every weight-matrix route but one BLAS call runs) changes
    the fingerprint: a choice measured on the old code is measured again, not trusted."""
    def columns(x, w, begin, end, out, how=0):  # another body: the product some other way
        out[...] = x @ w[:, begin:end]

    monkeypatch.setattr(routes, "ROUTE_CODE", (products.multiply, products.columns))
    before = routes.fingerprint()
    assert routes.fingerprint() == before  # the same code, the same line
    monkeypatch.setattr(routes, "ROUTE_CODE", (products.multiply, columns))
    assert routes.fingerprint() != before


def test_the_fingerprint_changes_with_how_the_routes_are_measured(monkeypatch):
    """The routes measured another way (the blocks sampled by another rule, or on fewer bytes) change the
    fingerprint: a table chosen on the old measurement (a sample the processor's cache held in part) is measured
    again, not read back from a routes file."""
    def sampled_blocks():  # another body: the first 8 matrices, as it once was
        return list(routes.products._met["blocks"].values())[:8], 48

    before = routes.fingerprint()
    monkeypatch.setattr(routes, "SAMPLE_BYTES", routes.SAMPLE_BYTES // 3)
    assert routes.fingerprint() != before
    monkeypatch.undo()
    assert routes.fingerprint() == before
    monkeypatch.setattr(routes, "sampled_blocks", sampled_blocks)
    assert routes.fingerprint() != before


def test_the_fingerprint_changes_with_the_code_that_measures_the_counts(monkeypatch):
    """The worker counts measured another way (here the heads' count timed on one cache for every count, as it
    once was) change the fingerprint too: a count chosen by the old measurement is measured again."""
    def measure_head_workers(repeats=routes.REPEATS, rng=None):  # another body
        return {}

    before = routes.fingerprint()
    monkeypatch.setattr(routes, "measure_head_workers", measure_head_workers)
    assert routes.fingerprint() != before


def test_the_worker_count_weighs_the_blocks_sample_as_a_pass_does(monkeypatch):
    """measure_workers times a sample of the block matrices (here 8 of 48) and the whole LM head, so the sample's
    time counts 48 / 8 = 6 times against the head's. With each product a fake time per count (blocks 10 s alone,
    7 s shared by two; the head 10 s and 14 s), at each of the 3 WORKER_MS: one worker 3 x (6 x 10 + 10) = 210 s,
    two 3 x (6 x 7 + 14) = 168 s, so two are taken. Its teeth: unscaled, 3 x (10 + 10) = 60 s against 3 x (7 + 14) = 63 s took one."""
    count_now = []
    monkeypatch.setattr(routes, "worker_counts", lambda: [1, 2])
    monkeypatch.setattr(routes.second_core, "use_workers", count_now.append)
    monkeypatch.setattr(routes, "sampled_blocks", lambda: (["a block matrix"] * 8, 48))

    def blocks(route, m):
        pass

    def head(route, m):
        pass

    monkeypatch.setattr(routes, "weight_products", lambda m_max, rng: {"blocks": blocks, "head": head})
    fake = {(1, blocks): 10.0, (2, blocks): 7.0, (1, head): 10.0, (2, head): 14.0}
    monkeypatch.setattr(routes, "timed", lambda make, route, m: fake[(count_now[-1], make)])
    assert routes.WORKER_MS == (1, 2, 4)
    seconds = routes.measure_workers(repeats=2)
    assert seconds == {1: 210.0, 2: 168.0} and routes.fewest_fastest(seconds) == 2
    monkeypatch.setattr(routes, "sampled_blocks", lambda: (["a block matrix"] * 8, 8))  # a rule without the scale
    assert routes.fewest_fastest(routes.measure_workers(repeats=2)) == 1


def fake_turns(monkeypatch, turns_of):
    """measure times one kind, "blocks", and each (route, m) takes the seconds of turns_of[(route, m)], one a
    turn (the last again once they run out); returns {(route, m): how many turns were timed}. No clock."""
    made = {key: 0 for key in turns_of}
    monkeypatch.setattr(routes.products, "_met_scores", {})
    monkeypatch.setattr(routes, "weight_products", lambda m_max, rng: {"blocks": "the blocks' products"})
    monkeypatch.setattr(routes, "candidates", lambda kind, m: [route for route, n in turns_of if n == m])

    def timed(make, route, m):
        turns, made[(route, m)] = turns_of[(route, m)], made[(route, m)] + 1
        return turns[min(made[(route, m)], len(turns)) - 1]

    monkeypatch.setattr(routes, "timed", timed)
    return made


def test_a_burst_on_one_turn_of_the_panels_does_not_hand_the_product_to_a_route_twice_as_slow(monkeypatch):
    """The panels take 1 s a turn but 3 s on their third (a burst of other work); halves 2 s, left
    after its first turn (more than PRUNE = 1.5 times the fastest). On the slowest turns halves would win (2 < 3),
    on the medians the panels (1 < 2): the turns disagree, so 3 more are timed, twice (MORE_TURNS = 2): 9 turns,
    median 1 s, the panels taken. m = 1 (one route) is settled after its 3 turns. Its teeth: a route's time taken
    as its slowest turn (the rule before) gives halves."""
    made = fake_turns(monkeypatch, {("panels", 1): [1.0], ("panels", 2): [1.0, 1.0, 3.0, 1.0],
                                    ("halves", 2): [2.0]})
    times = routes.measure(m_max=2, repeats=3)
    assert made == {("panels", 1): 3, ("panels", 2): 9, ("halves", 2): 1}
    assert times["blocks"][2] == {"panels": 1.0, "halves": 2.0} and routes.chosen(times)["blocks"][1] == "panels"
    monkeypatch.setattr(routes, "typical", max)
    fake_turns(monkeypatch, {("panels", 1): [1.0], ("panels", 2): [1.0, 1.0, 3.0, 1.0], ("halves", 2): [2.0]})
    assert routes.chosen(routes.measure(m_max=2, repeats=3))["blocks"][1] == "halves"


def test_a_route_fast_on_lucky_turns_only_is_timed_more_and_not_taken(monkeypatch):
    """One BLAS call on both cores is fast when the other core happens to be free: here 0.8 s on its first two
    turns, 2 s after; the panels 1 s on every turn. On 3 turns the median takes one call (0.8 s, the panels not
    within KEEP_DEFAULT = 1.05 of it), the slowest turns the panels (1 < 2): 3 more turns, and on 6 its median is
    2 s: the panels. Its teeth: with no more turns (MORE_TURNS = 0) one call is taken on its lucky turns."""
    turns_of = {("panels", 1): [1.0], ("panels", 2): [1.0], ("one call", 2): [0.8, 0.8, 2.0]}
    made = fake_turns(monkeypatch, turns_of)
    times = routes.measure(m_max=2, repeats=3)
    assert made == {("panels", 1): 3, ("panels", 2): 6, ("one call", 2): 6}
    assert routes.chosen(times)["blocks"] == ["panels", "panels"]
    monkeypatch.setattr(routes, "MORE_TURNS", 0)
    fake_turns(monkeypatch, turns_of)
    assert routes.chosen(routes.measure(m_max=2, repeats=3))["blocks"] == ["panels", "one call"]


def test_a_burst_on_one_turn_of_two_workers_does_not_choose_one(monkeypatch):
    """Each product takes 10 s on one worker, 6 s shared by two, but 30 s on two workers' second turn (a burst).
    A turn times 21 products (at each of the 3 WORKER_MS the head once and the blocks' sample weighed 48 / 8 = 6
    times): one worker 210 s, two 126 s, the burst 630 s. Medians take two, the slowest turns one: 3 more turns,
    twice, and on 9 turns the median takes two. Its teeth: the slowest turn (the rule before) takes one worker."""
    count_now, turns = [], {1: 0, 2: 0}
    monkeypatch.setattr(routes, "worker_counts", lambda: [1, 2])
    monkeypatch.setattr(routes, "sampled_blocks", lambda: (["a block matrix"] * 8, 48))
    monkeypatch.setattr(routes, "weight_products", lambda m_max, rng: {"blocks": lambda route, m: None,
                                                                       "head": lambda route, m: None})

    def use_workers(count):
        count_now.append(count)
        turns[count] += 1

    monkeypatch.setattr(routes.second_core, "use_workers", use_workers)
    monkeypatch.setattr(routes, "candidates", lambda kind, m: ["panels"])
    burst = {(2, 2): 30.0}
    monkeypatch.setattr(routes, "timed", lambda make, route, m: burst.get((count_now[-1], turns[count_now[-1]]),
                                                                          {1: 10.0, 2: 6.0}[count_now[-1]]))
    assert routes.measure_workers(repeats=3) == {1: 210.0, 2: 126.0} and turns == {1: 9, 2: 9}
    monkeypatch.setattr(routes, "typical", max)
    turns.update({1: 0, 2: 0})
    assert routes.fewest_fastest(routes.measure_workers(repeats=3)) == 1


def test_the_blocks_sample_is_the_biggest_models_first_matrices_that_hold_sample_bytes_and_counts_its_pass(
        monkeypatch):
    """sampled_blocks: of the block matrices met (a draft's narrower ones left out), the first in the order a pass
    multiplied them until they hold SAMPLE_BYTES, and how many the biggest model has. Each wide matrix here holds
    4 x 8 float32 = 128 bytes: 300 bytes are reached at the third (384), so three; with more bytes than all twelve
    hold, all twelve."""
    wide = [np.zeros((4, 8), dtype=np.float32) for _ in range(12)]
    narrow = [np.zeros((2, 8), dtype=np.float32) for _ in range(5)]
    met = {id(w): w for w in narrow[:2] + wide + narrow[2:]}
    monkeypatch.setattr(routes.products, "_met", {"blocks": met, "head": {}})
    monkeypatch.setattr(routes, "SAMPLE_BYTES", 300)
    sample, in_a_pass = routes.sampled_blocks()
    assert [id(w) for w in sample] == [id(w) for w in wide[:3]] and in_a_pass == 12
    monkeypatch.setattr(routes, "SAMPLE_BYTES", 12 * 128 + 1)
    assert [id(w) for w in routes.sampled_blocks()[0]] == [id(w) for w in wide]


def test_the_blocks_sample_of_124m_is_more_than_a_processors_last_cache_five_times_over(monkeypatch):
    """124M's block matrices (12 layers of c_attn 768 x 2304, c_proj 768 x 768, c_fc 768 x 3072, mlp c_proj 3072 x
    768, float32: 28.3 MB a layer) sampled by SAMPLE_BYTES: the first 24, six layers, 170 MB: more than five times
    the 32 MB last-level cache of the AMD EPYC Zen 5 where 8 matrices (57 MB) chose "2 rows padded to 3"."""
    shapes = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12
    met = {i: np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, (0, 0)) for i, shape in enumerate(shapes)}
    monkeypatch.setattr(routes.products, "_met", {"blocks": met, "head": {}})
    sample, in_a_pass = routes.sampled_blocks()
    assert (len(sample), in_a_pass) == (24, 48) and sum(w.nbytes for w in sample) == 6 * 28_311_552 > 5 * (32 << 20)


def test_calibrate_given_routes_takes_them_before_timing_and_keeps_them_with_this_machines_fingerprint(monkeypatch):
    """calibrate(..., routes=table) takes the routes given after the two untimed passes that fill the cache (no
    measuring: `choose` is not called) and before any timed one, and the costs keep them with the fingerprint of
    this machine; without routes it calls `choose` at the same point."""
    events = []
    monkeypatch.setattr(routes, "use", lambda table: events.append(("use", table)))
    monkeypatch.setattr(routes, "choose", lambda: events.append(("choose", None)) or {"blocks": ["vectors"]})

    def model(x, n=1):
        events.append(("pass", n))
        return np.zeros((n, 8), dtype=np.float32)

    model.n_vocab, model.n_ctx = 8, 64
    table = {"blocks": ["panels", "padded to 3", "vectors"]}
    costs = calibration.calibrate(model, m_max=3, repeats=1, prefix=[1, 2], routes=table)
    assert events[:3] == [("pass", 1), ("pass", 1), ("use", table)] and len(events) > 3
    assert all(kind == "pass" for kind, _ in events[3:])
    assert costs.routes == table and costs.routes_for == routes.fingerprint()
    events.clear()
    costs = calibration.calibrate(model, m_max=3, repeats=1, prefix=[1, 2])
    assert events[2] == ("choose", None) and costs.routes == {"blocks": ["vectors"]}


def test_a_row_count_is_padded_only_to_one_whose_own_route_is_direct():
    """m = 9's best is slower than m = 12's, and m = 12's than m = 13's: 12 is padded to 13, and 9, for which
    13 is more than PAD_MAX rows away, is not padded to 12 (whose rows are themselves padded) but keeps its own
    route, so that the table is one `check` takes: a padded route names a larger m whose route is direct."""
    seconds = {9: 4.0, 12: 2.0, 13: 1.0}
    times = {"blocks": {m: {"panels": seconds.get(m, 5.0), "one call": seconds.get(m, 5.0)} for m in range(1, 14)}}
    table = routes.chosen(times)
    assert table["blocks"][8] == "panels" and table["blocks"][11:] == ["padded to 13", "panels"]
    assert routes.check(table, "here") == table


def test_settle_chooses_the_routes_once_keeps_them_in_the_folder_and_a_later_run_reads_them(tmp_path, monkeypatch):
    """The first settle measures (`choose`) and writes ROUTES_FILE with this machine's fingerprint; the second
    takes the file's routes without measuring; a file written under another fingerprint is measured anew and
    rewritten; with no folder the routes are chosen and kept nowhere."""
    table = {"blocks": ["panels", "vectors", "padded to 4", "panels"]}
    chosen, taken = [], []
    monkeypatch.setattr(routes, "choose", lambda: chosen.append(1) or table)
    monkeypatch.setattr(routes, "use", taken.append)
    first, line = routes.settle(tmp_path)
    assert first == table and len(chosen) == 1 and "written to" in line and "2 vectors" in line
    second, line = routes.settle(tmp_path)
    assert second == table and len(chosen) == 1 and taken == [table] and "before" in line
    path = tmp_path / routes.ROUTES_FILE
    path.write_text(path.read_text().replace(routes.fingerprint(), "NumPy 0.1, another processor"))
    routes.settle(tmp_path)
    assert len(chosen) == 2 and routes.read_routes(path)["fingerprint"] == routes.fingerprint()
    _, line = routes.settle(None)
    assert len(chosen) == 3 and "written" not in line


@pytest.mark.parametrize("text, message", [
    ("{", "cannot read"),
    ('{"routes": {}}', "must hold"),
    ('{"fingerprint": "x", "routes": {"blocks": ["sideways"]}}', "for m = 1 must be panels"),
    ('{"fingerprint": "x", "routes": {"blocks": ["panels", "padded to \u00b2"]}}', "of blocks for m = 2 must be"),
])
def test_a_routes_file_settle_did_not_write_is_refused_in_one_line_that_says_to_delete_it(tmp_path, text, message):
    (tmp_path / routes.ROUTES_FILE).write_text(text)
    with pytest.raises(ValueError, match=message) as refused:
        routes.settle(tmp_path)
    assert str(tmp_path / routes.ROUTES_FILE) in str(refused.value) and "delete it" in str(refused.value)


def test_one_row_of_a_weight_matrix_keeps_the_default_route_and_is_never_padded():
    """The one-token step is a matrix-vector product on every route: only the default is timed for it (candidates),
    and however fast two rows looked, one row is not padded to them (chosen)."""
    assert routes.candidates("blocks", 1) == ["panels"] and routes.candidates("head", 1) == ["panels"]
    assert "panels" in routes.candidates("blocks", 2) and "vectors" in routes.candidates("blocks", 2)
    times = {"head": {1: {"panels": 3.0}, 2: {"panels": 1.0, "vectors": 1.2, "halves": 1.1, "one call": 1.3}}}
    assert routes.chosen(times) == {"head": ["panels", "panels"]}


def test_one_blas_call_on_both_cores_is_timed_only_where_no_helper_shares_the_cores(monkeypatch):
    """With helpers, BLAS's own threads and the helpers hand the cores back and forth, at a cost a short
    measurement does not see: the route is left out. With one worker (this process alone: one core, no fork, or
    one measured fastest), it is one of the routes."""
    monkeypatch.setattr(routes.second_core, "workers", lambda: 2)
    assert "one call" not in routes.candidates("blocks", 4) and "halves" in routes.candidates("blocks", 4)
    monkeypatch.setattr(routes.second_core, "workers", lambda: 1)
    assert routes.candidates("blocks", 4) == list(products.ROUTES)


def test_the_worker_counts_timed_go_up_to_the_cores_this_process_may_use_and_none_is_a_rule(monkeypatch):
    """1 and 2 on two cores, 1, 2, 4 and 6 on six, up to 16 on sixteen; only the forced count where one is forced,
    only 1 where no helper can run. The count taken is the fewest unless more are faster by more than
    KEEP_DEFAULT: on times given to it, not read from a clock."""
    monkeypatch.setattr(routes.second_core, "_REASON", None)
    monkeypatch.delenv(routes.second_core.WORKERS_VARIABLE, raising=False)
    for cores, counts in ((2, [1, 2]), (6, [1, 2, 4, 6]), (16, [1, 2, 4, 8, 16])):
        monkeypatch.setattr(routes.second_core, "_cores", lambda: cores)
        assert routes.worker_counts() == counts
    monkeypatch.setenv(routes.second_core.WORKERS_VARIABLE, "3")
    assert routes.worker_counts() == [3] and "(3 workers forced)" in routes.fingerprint()
    monkeypatch.delenv(routes.second_core.WORKERS_VARIABLE)
    monkeypatch.setattr(routes.second_core, "_REASON", "this process may use one core only")
    assert routes.worker_counts() == [1]
    assert routes.fewest_fastest({1: 10.0, 2: 6.0, 4: 5.9}) == 2 and routes.fewest_fastest({1: 10.0, 2: 9.8}) == 1
    assert routes.fewest_fastest({1: 10.0, 2: 12.0, 4: 8.0}) == 4 and routes.fewest_fastest({}) is None


@pytest.mark.parametrize("value", ["0", "65", "two", "\u00b2", "-1", "2.5"])
def test_a_forced_worker_count_that_is_no_count_is_refused_in_one_line(monkeypatch, value):
    monkeypatch.setenv(routes.second_core.WORKERS_VARIABLE, value)
    with pytest.raises(ValueError, match=f"{routes.second_core.WORKERS_VARIABLE}=.* must be a number of processes"):
        routes.second_core.forced_workers()


def test_the_worker_count_is_kept_in_the_table_checked_and_said(tmp_path):
    """A table holds the count chosen beside the routes; `check` takes 1 to WORKERS_MAX and refuses anything
    else in one line; `text` says it first."""
    table = {routes.WORKERS: 2, "blocks": ["panels", "vectors"]}
    assert routes.check(table, "here") == table and routes.text(table).startswith("2 workers; blocks 1 panels")
    for count in (0, True, "2", 65, 2.0):
        with pytest.raises(ValueError, match='"workers" must be a number of processes'):
            routes.check({routes.WORKERS: count, "blocks": ["panels"]}, "here")


def test_the_heads_count_is_kept_beside_the_workers_checked_against_them_and_said():
    """How many of the workers share attention's heads is a count of its own: `check` takes 1 to the table's
    worker count and refuses more, or anything that is no count, in one line; `text` says it after the workers."""
    table = {routes.WORKERS: 2, routes.HEAD_WORKERS: 1, "blocks": ["panels"]}
    assert routes.check(table, "here") == table and routes.text(table).startswith("2 workers, heads on 1; blocks")
    for count in (0, 3, True, "1", 1.0):
        with pytest.raises(ValueError, match=f'"{routes.HEAD_WORKERS}" must be a number of processes from 1 to 2'):
            routes.check({**table, routes.HEAD_WORKERS: count}, "here")


def test_the_heads_count_measured_is_among_the_workers_and_taken_with_the_routes(monkeypatch):
    """measure_head_workers times the heads shared among 1 .. workers() processes (counts of worker_counts), each
    count in turn, each on a cache made under it (products.kv_buffer: this process's own memory for 1), and puts
    the count taken before back; nothing to choose under one count. `use` takes a table's count and a table
    without one shares the heads among every worker again. No clock is read by the asserts."""
    monkeypatch.setattr(routes.second_core, "workers", lambda: 2)
    monkeypatch.setattr(routes, "worker_counts", lambda: [1, 2, 4])
    made_under, taken = {}, []

    def kv_buffer(shape):  # a cache, noting the heads' count it was made under
        buffer = np.zeros(shape, dtype=np.float32)
        made_under[id(buffer)] = routes.products._head_workers
        return buffer

    monkeypatch.setattr(routes.products, "kv_buffer", kv_buffer)
    def share_heads(attend, q, k, v, mask):
        while k.base is not None:  # down to the cache k is a view of
            k = k.base
        taken.append((routes.products._head_workers, q.shape[1], v.shape[1], made_under[id(k)]))

    monkeypatch.setattr(routes.products, "share_heads", share_heads)
    monkeypatch.setattr(routes.products, "_met_heads", {(4, 8): (None, 10)})
    routes.products.use_head_workers(2)
    seconds = routes.measure_head_workers(repeats=1)
    assert sorted(seconds) == [1, 2] and routes.products._head_workers == 2
    layers = routes.SCORE_LAYERS
    expected = [(count, m, 10 + m, count) for count in (1, 2) for m in (1, *routes.WORKER_MS) for _ in range(layers)]
    assert taken == expected
    monkeypatch.setattr(routes, "worker_counts", lambda: [2])
    assert routes.measure_head_workers(repeats=1) == {}
    routes.use({routes.WORKERS: 2, routes.HEAD_WORKERS: 1})
    assert routes.products.head_workers() == 1 and routes.current()[routes.HEAD_WORKERS] == 1
    routes.use({})
    assert routes.products.head_workers() == 2 and routes.HEAD_WORKERS not in routes.current()


def test_main_py_refuses_a_bad_routes_file_before_it_loads_the_models(tmp_path):
    """The routes file of the target's folder is checked before the models load (not after their warm-up): the
    target here is a folder with no weights, which loading would refuse with another error."""
    (tmp_path / routes.ROUTES_FILE).write_text(json.dumps({"fingerprint": "x", "routes": {"blocks": ["padded to 256"]
                                                                                           * 256}}))
    done = subprocess.run([sys.executable, "main.py", "--target_model_size", str(tmp_path), "--drafter", "lookup"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.startswith(f"error: the routes file {tmp_path / routes.ROUTES_FILE}: ")
    assert "delete it" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
