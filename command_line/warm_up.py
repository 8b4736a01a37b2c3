"""What main.py does before its timed runs, untimed: one-off costs that fall on neither sampler.

Read main.py first. Each model first runs once over the prompt (a warm-up: the first pass of a process pays for
memory the next ones reuse). Then this machine's fastest way to multiply the target's matrices is measured
(speed/routes.settle: a few seconds at a model's first run here) and kept in the target's folder as routes.json,
so the next run reads it instead; with --K auto, the costs K=auto plans with (r(m) and c) are measured too and
kept as r_table.json (r_table_no_cache.json with --kv_cache False). The default output says in plain words what
was measured and where it was kept; --verbose also prints the routes themselves (which product takes which route).
"""

import time
from pathlib import Path

from command_line.flags import errors_as_one_line
from loaders.download import MODEL_SIZES
from records import timed
from speed import calibration
from speed import routes as product_routes


def target_folder(flags):
    """The target's folder, where what was measured for it is kept (a released size's or a local one), or None
    for a model in the Hugging Face cache, which is not this project's to write into."""
    size = flags.target_model_size
    return Path(size) if Path(size).is_dir() else Path(flags.models_dir) / size if size in MODEL_SIZES else None


def check_kept_files(flags):
    """Before the models load: the routes kept in the target's folder (speed/routes.read_routes) and the costs
    file of --r_table, measured for this target and this machine (calibration.check_costs_fit); else a
    ValueError in one line naming the file, what is wrong and what to do."""
    folder = target_folder(flags)
    path = folder / product_routes.ROUTES_FILE if folder is not None else None
    if path is not None and path.is_file() and not flags.plain:
        product_routes.read_routes(path)
    if flags.r_table is not None:
        costs = calibration.load_costs(flags.r_table)
        calibration.check_costs_fit(costs, flags.r_table, flags.target_model_size, flags.draft_model_size)


def warm_up(flags, prompt_ids, new_draft, new_target):
    """Untimed: a pass of each model over the prompt, the products' routes, and with --K auto the costs it plans
    with (returned; else None). new_draft is None when there is no draft model."""
    warm_draft, warm_target = (new_draft() if new_draft is not None else None), new_target()
    if warm_draft is not None:
        warm_draft(prompt_ids)
    warm_target(prompt_ids)
    routes = settle_routes(flags) if not flags.plain else None  # --plain: no speed/, so no routes to choose
    if flags.K != "auto" or flags.tree is not None:
        return None
    costs, lines = calibrated_costs(flags, warm_target, warm_draft, routes)
    print("\n".join(lines) + "\n", flush=True)
    return costs


def file_state(path):
    """(size, modification time) of a file, or None if there is none: whether a call wrote it."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def settle_routes(flags):
    """speed/routes.settle for the target's folder; prints one plain line saying what was measured and where it
    was kept (with --verbose, the routes too). Returns the routes."""
    folder = target_folder(flags)
    path = folder / product_routes.ROUTES_FILE if folder is not None else None
    before = file_state(path) if path is not None else None
    start = time.perf_counter()
    with errors_as_one_line():  # a routes file that is not one settle wrote: one line naming it
        routes, line = product_routes.settle(folder)
    seconds = time.perf_counter() - start
    after = file_state(path) if path is not None else None
    what = "how this machine multiplies matrices fastest:"
    measured = f"{what} measured now ({seconds:.1f} s, not timed)"
    if path is None:
        plain = f"{measured}, not kept (the Hugging Face cache is not this project's to write into)"
    elif after is None:
        plain = f"{measured}, not kept: {path} could not be written (--verbose says why)"
    elif after == before:
        plain = f"{what} as measured before, kept in {path} (delete it to measure again)"
    else:
        plain = f"{measured}, kept in {path} for the next run"
    print(f"{plain}\n{line}" if flags.verbose else plain, flush=True)
    return routes


def calibrated_costs(flags, target, draft, routes):
    """(MeasuredCosts, lines to print): the costs K=auto plans with, from --r_table, else measured now.

    target, draft: the warm-up model functions (draft None without a draft model); routes: the products' routes,
    as speed/routes.settle gave them. A measured table is written into the target's folder, so that
    --r_table can give it again.
    """
    if flags.r_table is not None:
        costs = calibration.load_costs(flags.r_table)
        return costs, [f"K=auto plans with the costs in {flags.r_table}", costs_text(costs, flags.verbose)]
    costs, seconds = timed(lambda: calibration.calibrate(target, draft, routes=routes))
    costs.target, costs.draft = flags.target_model_size, flags.draft_model_size or ""
    lines = [f"K=auto plans with costs measured on this machine ({seconds:.1f} s, before the timed runs)"]
    name = calibration.COSTS_FILE if flags.kv_cache else calibration.COSTS_FILE.replace(".json", "_no_cache.json")
    folder = target_folder(flags)
    if folder is None:
        lines.append(f"(not kept in a file: {flags.target_model_size} lives in the Hugging Face cache, which is "
                     f"not this project's to write into)")
    else:
        try:
            path = calibration.save_costs(folder / name, costs)
        except OSError as error:
            lines.append(f"(not kept in {folder / name}: {error.strerror or error})")
        else:
            lines.append(f"(kept in {path}: --r_table {path} plans with them again, and the same seed then gives the "
                         f"same tokens)")
    return costs, lines + [costs_text(costs, flags.verbose)]


def costs_text(costs, verbose):
    """'r(m), m = 1..17: 1.00 ...; c = ...; o = ... (a 1-position target pass: ... ms)' (--verbose: MeasuredCosts'
    own summary, which adds the routes)."""
    if verbose:
        return costs.summary()
    r = " ".join(f"{value:.2f}" for value in costs.r_table)
    c = "" if costs.c is None else f"; c = {costs.c:.2f}"
    c += "" if costs.round_overhead is None else f"; o = {costs.round_overhead:.3f}"
    return f"r(m), m = 1..{len(costs.r_table)}: {r}{c} (a 1-position target pass: {costs.target_step_ms:.1f} ms)"


def with_costs(model, costs, draft=False):
    """The model function with the costs K=auto plans with set on it (a target's r_table, a draft's cost)."""
    if costs is not None:
        costs.use(None, model) if draft else costs.use(model)
    return model
