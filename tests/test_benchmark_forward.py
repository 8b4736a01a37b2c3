"""tools/benchmark_forward.py: its small helpers by hand, and one whole run on a tiny model (no timing is asserted:

Read tools/benchmark_forward.py first: these tests are its specification.

the machine is shared; what is checked is what does not depend on the clock)."""

import re

import numpy as np

import pytest

from tools import benchmark_forward, forward_tables
from tools.benchmark_forward import as_picogpt_runs_it, block_matrices, n_bytes, parse_list
from tools.forward_tables import format_table, r_of_m
from loaders.random_weights import random_params

TINY = {"n_vocab": 50, "n_ctx": 64, "n_embd": 8, "n_head": 2, "n_layer": 2}


def test_n_bytes_adds_up_every_array_of_a_nested_parameter_tree():
    """float32 [2, 3] (24 bytes) + float64 [4] (32) + float32 [1] (4) = 60."""
    tree = {"a": np.zeros((2, 3), np.float32), "b": [{"c": np.zeros(4)}, np.zeros(1, np.float32)]}
    assert n_bytes(tree) == 60


def test_block_matrices_are_the_four_products_of_each_block_in_the_order_a_step_uses_them():
    """c_attn [8, 24], attn c_proj [8, 8], c_fc [8, 32], mlp c_proj [32, 8], for each of the 2 blocks; their
    bytes are the weights' bytes minus wte, wpe, the biases and the layer norms."""
    params = random_params(TINY, np.random.default_rng(0))
    shapes = [m.shape for m in block_matrices(params)]
    assert shapes == [(8, 24), (8, 8), (8, 32), (32, 8)] * 2
    assert block_matrices(params)[2] is params["blocks"][0]["mlp"]["c_fc"]["w"]
    small = n_bytes(params["wte"]) + n_bytes(params["wpe"]) + n_bytes(params["ln_f"]) + 2 * 4 * (
        2 * 8 + 2 * 8 + 24 + 8 + 32 + 8)  # per block: ln_1, ln_2 (g, b), the four biases; 4 bytes each
    assert n_bytes(block_matrices(params)) == n_bytes(params) - small


def test_parse_list_takes_what_fire_gives_for_a_comma_separated_flag():
    """fire turns "124M,355M" into a tuple, "16" into 16, "124M" into a string."""
    assert parse_list(("124M", "355M")) == ["124M", "355M"]
    assert parse_list("124M,355M") == ["124M", "355M"]
    assert parse_list("124M") == ["124M"]
    assert parse_list(16, int) == [16]
    assert parse_list((16, 64), int) == [16, 64]


def test_r_of_m_divides_each_statistic_by_the_one_of_the_1_position_pass():
    """best: 2 -> 1.0, 3 / 2 = 1.5, 7 / 2 = 3.5; median: 3 -> 1.0, 4 / 3, 8 / 3."""
    seconds = {1: [2.0, 3.0, 4.0], 2: [3.0, 4.0, 9.0], 4: [7.0, 8.0, 8.5]}
    assert r_of_m(seconds, min) == {1: 1.0, 2: 1.5, 4: 3.5}
    assert r_of_m(seconds, np.median) == pytest.approx({1: 1.0, 2: 4 / 3, 4: 8 / 3})


def test_format_table_right_aligns_each_column_to_its_widest_cell():
    assert format_table(("a", "bbb"), [("xx", 1), ("y", 22)]).splitlines() == [" a  bbb", "xx    1", " y   22"]


def test_picogpt_setting_has_float64_position_embeddings_and_row_major_weights_of_the_same_values():
    params = random_params(TINY, np.random.default_rng(0))
    pico = as_picogpt_runs_it(params)
    assert pico["wpe"].dtype == np.float64 and pico["wte"].dtype == np.float32
    w, w_pico = params["blocks"][1]["mlp"]["c_fc"]["w"], pico["blocks"][1]["mlp"]["c_fc"]["w"]
    assert w.flags.f_contiguous and w_pico.flags.c_contiguous and (w == w_pico).all()


def test_a_replayed_step_returns_the_real_steps_rows_without_multiplying_by_a_weight(monkeypatch):
    """The breakdown's "the same rest, alone" times a model step whose weight products and attention are answered
    from a record of a real step (`replayed`). The answers must be asked for in the order they were recorded:
    the rows come out bit for bit the real step's, and no product is made (products.multiply never runs, nor
    the real share_heads). Its teeth: a record that also kept the scores products made inside share_heads
    (never asked for by the replay) answers the first attention with the first scores, [2, 1, 12] where
    [2, 1, 4] was due, and the replay fails. A plain model's products do not pass through speed.products at
    all: refused, in one line."""
    from model_fn import create_model_fn

    params = random_params(TINY, np.random.default_rng(0))
    model = create_model_fn(params, TINY, temperature=1.0)
    ids = list(range(12))
    model(ids, 1)
    real_rows = model(ids, 1)
    replay = benchmark_forward.replayed(lambda: model(ids, 1))
    assert benchmark_forward.products.matmul.__name__ == "matmul"  # put back after recording

    made = []
    monkeypatch.setattr(benchmark_forward.products, "multiply", lambda *args: made.append(args))
    monkeypatch.setattr(benchmark_forward.products, "share_heads", lambda *args: made.append(args))
    np.testing.assert_array_equal(replay(), real_rows)
    assert made == []
    monkeypatch.undo()
    np.testing.assert_array_equal(model(ids, 1), real_rows)  # the real products are back

    plain = create_model_fn(params, TINY, temperature=1.0, plain=True)
    with pytest.raises(ValueError, match="made no product through speed.products"):
        benchmark_forward.replayed(lambda: plain(ids, 1))



def test_a_step_timed_inside_reports_each_weight_product_and_attention_once_as_the_step_made_them():
    """The breakdown times the products and the attention where a step makes them (`timed_inside`), besides alone.
    A TINY step (2 layers) makes 4 block products a layer, then the LM head, and attends once a layer: 9 products
    and 2 attentions, in that order, each reported once. Attention's scores, a product made INSIDE share_heads, are
    not reported (they are the attention's time): counted, the blocks' time would hold them twice (its teeth: a
    wrapper without the depth count reports 4 scores products more). The three parts' seconds are within the
    step's."""
    import time
    from model_fn import create_model_fn

    params = random_params(TINY, np.random.default_rng(0))
    model = create_model_fn(params, TINY, temperature=1.0)
    ids = list(range(12))
    model(ids, 1)
    reported = []
    on_call = lambda name, args, answer, seconds: reported.append(  # noqa: E731
        name if name == "share_heads" else benchmark_forward.products.kind_of(*args))
    benchmark_forward.plugged(*benchmark_forward.outermost_calls(on_call), lambda: model(ids, 1))
    assert reported == (["blocks", "share_heads", "blocks", "blocks", "blocks"] * 2 + ["head"]), reported
    assert benchmark_forward.products.matmul.__name__ == "matmul"  # put back
    start = time.perf_counter()
    seconds = benchmark_forward.timed_inside(lambda: model(ids, 1))()
    step = time.perf_counter() - start
    assert set(seconds) == set(benchmark_forward.INSIDE) and all(s > 0 for s in seconds.values())
    assert sum(seconds.values()) < step

def test_the_parts_in_the_step_are_those_of_the_fastest_step_they_were_timed_in(monkeypatch):
    """Three rounds whose steps took 10, 9 and 11 ms with their parts (blocks, head, attention) 6/2/1, 7/1/0.5 and
    5/3/2 ms: the breakdown keeps the 9 ms step's own parts, 7/1/0.5, so that its rest (9 - 8.5 - logits) is of one
    instant. Its teeth: each part's best on its own (5/1/0.5, the old rule) would leave a rest of 2.5 ms that no
    round had."""
    from model_fn import create_model_fn

    rounds = iter([(0.010, (0.006, 0.002, 0.001)), (0.009, (0.007, 0.001, 0.0005)), (0.011, (0.005, 0.003, 0.002))])

    def scripted_inside(step):
        def run():
            total, parts = next(rounds)
            return {"total": total, **dict(zip(benchmark_forward.INSIDE, parts))}
        return run

    real_timed = benchmark_forward.timed

    def timed(part):
        answer, seconds = real_timed(part)
        if isinstance(answer, dict) and "total" in answer:
            total = answer.pop("total")
            return answer, total
        return answer, seconds

    monkeypatch.setattr(benchmark_forward, "timed_inside", scripted_inside)
    monkeypatch.setattr(benchmark_forward, "timed", timed)
    params = random_params(TINY, np.random.default_rng(0))
    model = create_model_fn(params, {**TINY, "n_vocab": 50}, temperature=0)
    best = benchmark_forward.step_breakdown(model, params, list(range(12)), 8, 3, np.random.default_rng(0),
                                            TINY["n_head"])
    assert best["model step, its parts timed"] == 0.009
    assert [best[f"{part}, in the step"] for part in benchmark_forward.INSIDE] == [0.007, 0.001, 0.0005]


def test_the_bandwidth_products_leave_their_matrix_out_of_the_matrices_the_routes_are_timed_on(monkeypatch):
    """speed/routes.py times the routes on the widest block matrices and the biggest LM head a model multiplied
    (products remembers them). The bandwidth's matrix, wider than any model's, must not be among them: it was, and
    the routes of 355M to 1558M were chosen on it. Its teeth: the same products through products.matmul are
    noted, as a block matrix (w) and as an LM head (w.T)."""
    monkeypatch.setattr(benchmark_forward.products, "_met", {"blocks": {}, "head": {}})
    w = np.zeros((1024, 1024), dtype=np.float32)  # 4 MB: big enough to be noted (second_core.MIN_BYTES)
    w.flags.writeable = False
    v = np.ones(1024, dtype=np.float32)
    assert len(benchmark_forward.product_bandwidths(w, v, 2)) == 2
    assert benchmark_forward.products._met == {"blocks": {}, "head": {}}
    monkeypatch.setattr(benchmark_forward, "one_row_product", benchmark_forward.products.matmul)
    benchmark_forward.product_bandwidths(w, v, 2)
    assert [list(met.values()) for met in benchmark_forward.products._met.values()] == [[w], [w]]


def test_a_whole_run_on_a_tiny_model_prints_every_table_and_writes_both_plots(monkeypatch, tmp_path, capsys):
    """A tiny size and a small bandwidth matrix stand in for the real ones: every table has its rows (the
    greedy decoders with and without the cache must agree, or the run stops), r(1) is exactly 1, and the two
    plots are written (when matplotlib is installed)."""
    monkeypatch.setitem(benchmark_forward.HPARAMS, "tiny", TINY)
    monkeypatch.setattr(benchmark_forward, "BANDWIDTH_SHAPE", (64, 64))
    benchmark_forward.main(sizes="tiny", n_prompt=4, n_new=3, repeats=2, no_cache_sizes="tiny", breakdown_rounds=2,
                           r_max=3, r_repeats=2, context_size="tiny", context_lengths="4,20", context_steps=2,
                           context_rounds=1, img_dir=str(tmp_path))
    out = capsys.readouterr().out
    for expected in ["x floor", "block matrix products", "= step through the sampler", "tiny best  1.00",
                     "tiny median  1.00", "ms/token, median"]:
        assert expected in out
    pytest.importorskip("matplotlib")
    assert (tmp_path / "forward_r_of_m.png").is_file()
    assert (tmp_path / "forward_ms_per_token_vs_context.png").is_file()


def test_unknown_sizes_stop_the_run_with_the_sizes_to_choose_from(capsys):
    with pytest.raises(SystemExit) as exit_info:
        benchmark_forward.main(sizes="125M")
    assert exit_info.value.code == 2
    assert re.search("unknown size.*'125M'.*choose from 124M, 355M, 774M, 1558M", capsys.readouterr().err)


def test_json_holds_every_measurement_and_reads_back_into_the_same_tables(monkeypatch, tmp_path, capsys):
    """--json writes what the tables are made from; from_json rebuilds the results, and the plain tables made
    from them are the ones the run printed (markdown=True formats the same numbers for the README)."""
    import json

    monkeypatch.setitem(benchmark_forward.HPARAMS, "tiny", TINY)
    monkeypatch.setattr(benchmark_forward, "BANDWIDTH_SHAPE", (64, 64))
    benchmark_forward.main(sizes="tiny", n_prompt=4, n_new=3, repeats=2, no_cache_sizes="", breakdown_rounds=2,
                           r_max=3, r_repeats=2, context_size="tiny", context_lengths="4,20", context_steps=2,
                           context_rounds=1, img_dir=None, json=str(tmp_path / "forward.json"))
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "forward.json").read_text())
    results, context, run = benchmark_forward.from_json(data)
    assert json.loads(json.dumps(benchmark_forward.to_json(results, context, run))) == data
    assert forward_tables.main_table(results) in out and forward_tables.r_table(results) in out
    assert forward_tables.breakdown_table(results) in out and forward_tables.context_table(context) in out
    n_ctx = TINY["n_ctx"]  # less than the default --r_context 512 + 3: cut to fit, and said (it once was silent)
    assert f"tiny: r(m) after {n_ctx - 3} cached tokens, all its context of {n_ctx} holds before 3 more" in out
    assert sorted(results[0].pass_seconds) == [1, 2, 3] and sorted(context.seconds) == [4, 20]
    assert run["settings"]["repeats"] == 2 and len(run["load_average"]) == 2 and run["threads"] >= 1
    markdown = forward_tables.main_table(results, markdown=True).splitlines()
    assert markdown[1].startswith("| --- |") and "floor (median)" in markdown[0]
    assert "ms (best of 2)" in forward_tables.breakdown_table(results, markdown=True, rounds=2)


def test_r_table_dir_writes_the_costs_file_that_k_auto_plans_with(monkeypatch, tmp_path, capsys):
    """--r_table_dir writes each size's r(m) as calibration.save_costs does: the file `main.py --r_table` reads,
    r(m) the median over the rounds of the same ratios the printed table's median row shows. A folder that does
    not exist yet but can be made (as the flag's check allows) is made before the measurement; it used to end
    the run, measured, in a FileNotFoundError traceback."""
    from speed import calibration

    monkeypatch.setitem(benchmark_forward.HPARAMS, "tiny", TINY)
    monkeypatch.setattr(benchmark_forward, "BANDWIDTH_SHAPE", (64, 64))
    folder = tmp_path / "new" / "costs"
    benchmark_forward.main(sizes="tiny", n_prompt=4, n_new=3, repeats=2, no_cache_sizes="", breakdown_rounds=2,
                           r_max=3, r_repeats=2, context_size=None, img_dir=None, r_table_dir=str(folder))
    costs = calibration.load_costs(folder / "r_table_tiny.json")
    assert f"wrote {folder / 'r_table_tiny.json'}" in capsys.readouterr().out
    assert len(costs.r_table) == 3 and costs.r_table[0] == 1.0 and costs.c is None


def test_an_empty_sizes_flag_measures_only_the_context(monkeypatch, tmp_path, capsys):
    """--sizes "" (what tools/make_readme_figures.py runs with OPENBLAS_NUM_THREADS=1): no size, no bandwidth matrix,
    only the ms/token against the context."""
    import json

    monkeypatch.setitem(benchmark_forward.HPARAMS, "tiny", TINY)
    benchmark_forward.main(sizes="", no_cache_sizes="", context_size="tiny", context_lengths="4,20", context_steps=2,
                           context_rounds=1, img_dir=str(tmp_path), json=str(tmp_path / "context.json"))
    out = capsys.readouterr().out
    assert "x floor" not in out and "ms/token, median" in out
    results, context, _ = benchmark_forward.from_json(json.loads((tmp_path / "context.json").read_text()))
    assert results == [] and context.size == "tiny"
    assert not (tmp_path / "forward_r_of_m.png").exists()


def test_a_model_folder_is_a_size_with_its_shapes(tmp_path):
    """A folder's hparams.json gives the shapes (the weights are random), and the folder's name labels it."""
    import json

    (tmp_path / "little").mkdir()
    (tmp_path / "little" / "hparams.json").write_text(json.dumps(TINY))
    assert benchmark_forward.size_hparams(str(tmp_path / "little")) == TINY
    context = benchmark_forward.measure_context(str(tmp_path / "little"), [4], 1, 1, np.random.default_rng(0))
    assert context.size == "little" and len(context.seconds[4]) == 1


def test_a_context_model_measured_after_the_sizes_whose_matrices_are_all_freed_runs_to_its_table(
        monkeypatch, capsys):
    """A small size leaves the helper process holding only the bandwidth matrix, freed once the sizes are
    measured; the context model's first shared attention then forked a new helper of no matrix at all (a
    `max() arg is an empty sequence` traceback after the whole measurement). The bandwidth matrix here is big
    enough to be shared, and the context model's cache too (2 layers x 1024 positions x 64 wide: 1 MB)."""
    monkeypatch.setitem(benchmark_forward.HPARAMS, "tiny", TINY)
    monkeypatch.setitem(benchmark_forward.HPARAMS, "wide", {**TINY, "n_ctx": 1024, "n_embd": 64})
    monkeypatch.setattr(benchmark_forward, "BANDWIDTH_SHAPE", (512, 512))  # 1 MB: handed to the helper
    benchmark_forward.main(sizes="tiny", n_prompt=4, n_new=3, repeats=1, no_cache_sizes="", breakdown_rounds=1,
                           r_max=3, r_repeats=1, context_size="wide", context_lengths="16,64", context_steps=1,
                           context_rounds=1, img_dir=None)
    assert "wide: context" in capsys.readouterr().out
