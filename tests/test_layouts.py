"""A weight matrix stored row by row gives the same products as one stored column by column, and the layouts are
measured, kept with the routes and read back.

Read speed/layouts.py first (why the order in memory matters, how it is chosen), then speed/products.py's
`by_rows`. The reference is NumPy's own x @ w in float32; a product may differ from it only by float32 rounding
(the same terms added in another order). No test here reads a real clock: `measure` is given a fake one.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import gpt2
import utils
from loaders.hf_folder import load_hf_gpt2
from loaders.random_weights import random_params
from loaders.tf_checkpoint import load_gpt2_params_from_tf_ckpt
from model_fn import create_model_fn
from sampling import autoregressive_sampling
from speed import layouts, plug, products, routes, second_core
from test_load import GPT2_VOCAB, TF_CKPT_DIR, copy_tokenizer, random_flat_params, write_hf_folder
from test_load import HPARAMS as TINY_HPARAMS
from test_products import assert_same_product, default_routes  # noqa: F401  the default routes here too

ROWS = {"blocks": "rows", "head": "rows"}
HPARAMS = {"n_vocab": 1024, "n_ctx": 96, "n_embd": 512, "n_head": 8, "n_layer": 2}  # matrices of 1 MB and more
TOLERANCE = 1e-4  # logits of size ~1, the same terms added in another order: a few 1e-6 apart


def read_only(array):
    array.flags.writeable = False
    return array


@pytest.mark.parametrize("n_in, n_out", [(768, 2304), (3072, 768), (1600, 6400), (768, 50257)],
                         ids=lambda value: str(value))
def test_a_matrix_stored_by_row_gives_x_times_w_for_every_row_count_every_way_and_every_share(n_in, n_out):
    """A block matrix of 124M and 1558M and the LM head's wte.T, stored row by row (C order; the head as wte in
    Fortran order): products.columns by each way (HOWS: the blocks of rows, m matrix-vector products, one BLAS
    call) for m = 1 .. PANEL_ROWS_MAX rows, over all the columns and over a share of them, equal x @ w."""
    rng = np.random.default_rng(n_in + n_out)
    w = read_only(rng.standard_normal((n_in, n_out), dtype=np.float32) * 0.02)  # row-major
    if n_out > 10_000:
        w = read_only(np.asfortranarray(w.T)).T  # wte [n_vocab, n_embd] in Fortran order: wte.T by row
    assert w.flags.c_contiguous and products.kind_of(np.zeros((2, n_in), np.float32), w) in ("blocks", "head")
    x = rng.standard_normal((products.PANEL_ROWS_MAX, n_in), dtype=np.float32)
    reference = x @ np.asfortranarray(w)  # BLAS's own product, the other layout
    begin, end = 64, n_out - 64 * 3
    for how, name in enumerate(products.HOWS):
        for m in range(1, products.PANEL_ROWS_MAX + 1, 1 if n_out < 10_000 else 5):
            y = np.empty((m, n_out), dtype=np.float32)
            products.columns(x[:m], w, 0, n_out, y, how)
            assert_same_product(y, reference[:m], f"{m} rows by {name}")
            share = np.empty((m, end - begin), dtype=np.float32)
            products.columns(x[:m], w, begin, end, share, how)
            assert_same_product(share, reference[:m, begin:end], f"{m} rows by {name}, columns {begin}-{end}")


def test_the_check_has_teeth_blocks_of_rows_missing_their_last_block_fail(monkeypatch):
    """A `by_rows` whose blocks of rows leave out the last one (a sum over all but one block) is off by far more
    than rounding: the check above would catch a wrong blocking."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((768, 2304), dtype=np.float32) * 0.02
    x = rng.standard_normal((4, 768), dtype=np.float32)
    original = np.sum
    monkeypatch.setattr(np, "sum", lambda a, axis=None, out=None: original(a[:-1], axis=axis, out=out))
    y = np.empty((4, 2304), dtype=np.float32)
    products.by_rows(x, w, y, "panels")
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="off by"):
        assert_same_product(y, x @ w, "the last block of rows left out")


def test_a_block_of_rows_is_32_rows_for_every_gpt2_and_divides_any_width():
    """32 rows x ROW_BLOCK_COLUMNS (4,096) float32 = 512 KB, ROW_BLOCK_BYTES; a width 32 does not divide takes the
    most rows that do, down to 1 (n_in = 771 = 3 x 257: 1)."""
    assert [products.row_block(n) for n in (768, 1024, 1280, 1600, 3072, 6400)] == [32] * 6
    assert products.row_block(48) == 16 and products.row_block(771) == 1


@pytest.fixture(scope="module")
def both_models():
    """The same random weights in the default layouts and stored by row."""
    default = random_params(HPARAMS, np.random.default_rng(0), std=0.05)
    rows = random_params(HPARAMS, np.random.default_rng(0), std=0.05, layouts=ROWS)
    return default, rows


def test_random_weights_stored_by_row_are_the_same_numbers_in_the_other_order(both_models):
    """Every block matrix C-contiguous and wte Fortran-ordered, the values those of the default layout's."""
    default, rows = both_models
    for block, block_rows in zip(default["blocks"], rows["blocks"]):
        for part, name in (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj")):
            w, w_rows = block[part][name]["w"], block_rows[part][name]["w"]
            assert w.flags.f_contiguous and w_rows.flags.c_contiguous and np.array_equal(w, w_rows)
    assert rows["wte"].flags.f_contiguous and np.array_equal(rows["wte"], default["wte"])


def test_a_model_stored_by_row_decodes_as_the_plain_core_does(both_models):
    """Plugged in (speed/plug.py), the model stored by row gives the plain core's logits (the default layout,
    gpt2.py alone) to float32 rounding for a prompt, then for a pass of 5 positions after it, and writes the same
    24 greedy tokens."""
    default, rows = both_models
    prompt, guesses = list(range(40, 80)), [7, 99, 512, 3, 1000]
    weights, cache = plug.fast(rows, HPARAMS["n_head"], HPARAMS["n_ctx"])
    logits, cache = gpt2.gpt2(prompt, **weights, n_head=HPARAMS["n_head"], past=cache)
    assert np.max(np.abs(logits - gpt2.gpt2(prompt, **default, n_head=HPARAMS["n_head"]))) < TOLERANCE
    logits, _ = gpt2.gpt2(guesses, **weights, n_head=HPARAMS["n_head"], past=cache)
    expected = gpt2.gpt2(prompt + guesses, **default, n_head=HPARAMS["n_head"])[-5:]
    assert np.max(np.abs(logits - expected)) < TOLERANCE
    plain = create_model_fn(default, HPARAMS, temperature=0, plain=True)
    stored_by_row = create_model_fn(rows, HPARAMS, temperature=0)
    rng = np.random.default_rng(1)
    assert autoregressive_sampling(prompt, plain, 24, rng) == autoregressive_sampling(prompt, stored_by_row, 24, rng)


def test_the_loaders_read_each_matrix_in_the_layouts_asked_with_the_same_values():
    """OpenAI's checkpoint and a Hugging Face folder, read with the default layouts and by row: every block
    matrix C-contiguous and wte Fortran-ordered in the second, the values equal; no other tensor changes."""
    hf_folder = Path(__file__).resolve().parent / "fixtures" / "hf_folder_tiny"
    readers = [lambda layouts: load_gpt2_params_from_tf_ckpt(TF_CKPT_DIR / "model.ckpt", TINY_HPARAMS, layouts=layouts),
               lambda layouts: load_hf_gpt2(hf_folder, layouts=layouts)[1]]
    for read in readers:
        default, rows = read(None), read(ROWS)
        for block, block_rows in zip(default["blocks"], rows["blocks"]):
            for part, name in (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj")):
                w, w_rows = block[part][name]["w"], block_rows[part][name]["w"]
                assert w.flags.f_contiguous and w_rows.flags.c_contiguous and np.array_equal(w, w_rows)
        assert default["wte"].flags.c_contiguous and rows["wte"].flags.f_contiguous
        assert np.array_equal(default["wte"], rows["wte"]) and rows["wpe"].flags.c_contiguous


def fake_times(columns, rows):
    return {"blocks": {"columns": columns, "rows": rows}, "head": {"columns": 1.0, "rows": 1.0}}


def test_rows_are_taken_only_where_measured_faster_by_more_than_5_percent():
    """1.0 s by column against 0.9 by row: rows (faster by 11%); against 0.96: columns (4%: noise is no reason);
    a tie and a slower row: columns. The head, tied in every case: columns."""
    assert layouts.chosen(fake_times(1.0, 0.9)) == {"blocks": "rows", "head": "columns"}
    for rows_seconds in (0.96, 1.0, 1.2):
        assert layouts.chosen(fake_times(1.0, rows_seconds)) == layouts.DEFAULT


def test_measure_times_both_layouts_in_turns_for_each_kind_after_the_helpers_have_the_matrices(monkeypatch):
    """With a clock that advances 2 s a product while the matrices are stored by row and 3 s by column, each
    kind's layouts measure as rows faster. Before any is timed, every matrix is multiplied twice (so that the
    helper processes are forked with them); then each kind's layouts in turns, each repeat: one route for one
    row, every route for LAYOUT_MS's 4 rows. The matrices are of the model's shapes, read-only, 8 MB or more."""
    calls = []

    def fake_seconds(matrices, rows, route, kind, clock):
        w = matrices[0]
        calls.append((kind, "rows" if w.flags.c_contiguous and not w.flags.f_contiguous else "columns", route))
        assert not w.flags.writeable and (sum(w.nbytes for w in matrices) >= layouts.MEASURED_BYTES
                                          or w.shape == (256, 1000))
        return 2.0 if calls[-1][1] == "rows" else 3.0

    monkeypatch.setattr(layouts, "_seconds", fake_seconds)
    monkeypatch.setattr(layouts, "MEASURED_BYTES", 8 << 20)  # (a smaller fill: this test runs no product)
    times = layouts.measure({"n_embd": 256, "n_vocab": 1000}, repeats=2)
    assert layouts.chosen(times) == ROWS
    warm, timed = calls[:8], calls[8:]
    assert sorted((kind, layout) for kind, layout, _ in warm) == sorted(
        [(kind, layout) for kind in ("blocks", "head") for layout in layouts.LAYOUTS] * 2)
    per_layout = 1 + len(products.ROUTES)  # one row one route, 4 rows every route
    for kind_calls, kind in ((timed[: 4 * per_layout], "blocks"), (timed[4 * per_layout:], "head")):
        assert [layout for _, layout, _ in kind_calls] == (["columns"] * per_layout + ["rows"] * per_layout) * 2
        assert {k for k, _, _ in kind_calls} == {kind}


def test_a_process_measures_once_takes_kept_layouts_without_measuring_and_a_tiny_model_keeps_the_default(
        monkeypatch):
    """for_model: kept layouts (a routes file's) are taken as they are; with none, measured once, then the same
    for every later model; a model whose matrices are under second_core.MIN_BYTES keeps the default unmeasured."""
    measured = []
    monkeypatch.setattr(layouts, "measure", lambda hparams: measured.append(hparams) or fake_times(1.0, 0.5))
    layouts.take(None)
    assert layouts.for_model(ROWS, HPARAMS) == ROWS and measured == []
    layouts.take(None)
    assert layouts.for_model(None, HPARAMS) == {"blocks": "rows", "head": "columns"}
    assert layouts.for_model(None, HPARAMS) == {"blocks": "rows", "head": "columns"} and len(measured) == 1
    layouts.take(None)
    assert layouts.for_model(None, {**HPARAMS, "n_embd": 64}) == layouts.DEFAULT and len(measured) == 1


def test_the_routes_file_keeps_the_layouts_and_gives_them_back_only_on_their_fingerprint(tmp_path, monkeypatch):
    """settle writes the layouts the process read its model in beside the routes; kept_layouts gives them back
    while the fingerprint (which names them) is this machine's; a file of another machine gives none; a file
    whose layouts are not two of LAYOUTS is refused in one line naming it."""
    monkeypatch.setattr(routes, "choose", lambda: {})
    layouts.take(ROWS)
    routes.settle(tmp_path)
    kept = json.loads((tmp_path / routes.ROUTES_FILE).read_text())
    assert kept["layouts"] == ROWS and "blocks by row, head by row" in kept["fingerprint"]
    assert routes.kept_layouts(tmp_path) == ROWS
    layouts.take(layouts.DEFAULT)  # this process reads by column: the file's fingerprint is not its own
    assert "blocks by column, head by column" in routes.fingerprint()
    assert routes.kept_layouts(tmp_path) == ROWS, "the kept layouts are checked against their own fingerprint"
    (tmp_path / routes.ROUTES_FILE).write_text(json.dumps({**kept, "fingerprint": "another machine"}))
    assert routes.kept_layouts(tmp_path) is None
    (tmp_path / routes.ROUTES_FILE).write_text(json.dumps({**kept, "layouts": {"blocks": "diagonal"}}))
    with pytest.raises(ValueError, match=r"routes file .*\"layouts\" must be .*delete it"):
        routes.kept_layouts(tmp_path)


def test_main_reads_both_models_in_the_layouts_its_targets_folder_keeps(release_124M_dir, tmp_path):
    """utils.download_and_load (main.py's loading) takes the layouts kept in the TARGET's routes.json before it
    reads the draft, so that both models are read as in the run that measured them (a draft's folder keeps none):
    here by row, in tiny models that would otherwise keep the default unmeasured."""
    folders = []
    for name, seed in (("draft", 6), ("target", 7)):
        flat = random_flat_params(GPT2_VOCAB, np.random.default_rng(seed))
        folders.append(write_hf_folder(tmp_path / name, flat, config_changes={"vocab_size": GPT2_VOCAB["n_vocab"]}))
        copy_tokenizer(release_124M_dir, folders[-1], hf_names=True)
    kept = {"fingerprint": routes.fingerprint(ROWS), "routes": {}, "layouts": ROWS}
    (folders[1] / routes.ROUTES_FILE).write_text(json.dumps(kept))
    layouts.take(None)
    draft, target = utils.download_and_load(str(folders[0]), str(folders[1]), str(tmp_path))
    for _, _, params in (draft, target):
        assert params["blocks"][0]["mlp"]["c_fc"]["w"].flags.c_contiguous and params["wte"].flags.f_contiguous
    assert layouts.current() == ROWS


@pytest.mark.skipif(second_core.unavailable() is not None, reason=f"no helper process here: {second_core.unavailable()}")
def test_measuring_shares_the_products_with_the_helpers_and_leaves_none_holding_its_matrices(monkeypatch):
    """The matrices measured are multiplied as a model's are, their columns shared with helper processes (their
    job counts grow); when measure returns they are freed and no helper is left holding them (a helper's copy
    would keep their memory while the model is read)."""
    monkeypatch.setattr(layouts, "MEASURED_BYTES", 8 << 20)
    posted = []
    original = products.multiply

    def multiply(x, w, route, kind):
        y = original(x, w, route, kind)
        posted.append(sum(helper.posted for helper in second_core._team))
        return y

    monkeypatch.setattr(products, "multiply", multiply)
    second_core._stop_team()  # no helper, and none for a matrix of an earlier test's that is still alive
    second_core._seen.clear()
    layouts.measure(HPARAMS, repeats=1)
    assert max(posted) > 0, "no product was shared with a helper"
    assert second_core._team == [], "a helper outlived the measurement"
