"""The measured tables in README.md and docs/BENCHMARKS.md agree with themselves, whatever the run measured: a ratio is
the quotient of the cells it names, to their rounding, and a summary quotes its table.

Read tests/page_blocks.py first (how a generated block is found). The tables come from tools/benchmark_forward.py,
tools/measure_loading.py, tools/pass_parts.py, tools/compare_llama_cpp.py and the small timings; no test here
reads a clock: a run on a busy machine makes other numbers, but never a table that contradicts itself.
"""

import math
import re

import pytest

from page_blocks import generated_block, markdown_rows
from tools.machine import KINDS, NOT_MEASURED


UNITS = {"GB": 1e9, "MB": 1e6, "kB": 1e3, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "%": 1e-2}


def measured(cell):
    """(value, how far rounding may have moved it) of the number a cell starts with, in base units:
    '2.20x' -> (2.2, 0.005); '498 MB' -> (498e6, 0.5e6); '55%)' -> (0.55, 0.005); '1.07e-05 s' -> (1.07e-05, 5e-08)."""
    match = re.match(r"\s*(-?\d+(?:\.(\d*))?)(?:e([+-]?\d+))?\s*(GB|MB|kB|ms|µs|s|%)?", cell)
    assert match, f"no number in {cell!r}"
    number, decimals, exponent, unit = match.groups()
    scale = 10.0 ** int(exponent or 0) * UNITS.get(unit, 1.0)
    return float(number) * scale, 0.5 * 10.0 ** -len(decimals or "") * scale


def consistent(ratio, numerator, denominator):
    """Whether the cell `ratio` is numerator / denominator, each of the three as printed (rounded), or given
    as (value, how far rounding may have moved it)."""
    (r, dr), (n, dn), (d, dd) = (cell if isinstance(cell, tuple) else measured(cell)
                                 for cell in (ratio, numerator, denominator))
    low = (n - dn) / (d + dd)
    high = (n + dn) / (d - dd) if d > dd else math.inf
    return low - dr - 1e-12 <= r <= high + dr + 1e-12


def test_measured_reads_a_cells_number_unit_and_rounding():
    assert measured("2.20x") == (2.2, pytest.approx(0.005))
    assert measured("498 MB") == (498e6, 0.5e6)
    assert measured("55%)") == (pytest.approx(0.55), pytest.approx(0.005))
    assert measured("1.07e-05 s") == (pytest.approx(1.07e-5), pytest.approx(5e-8))
    assert consistent("2.20x", "161.0", "73.3") and not consistent("2.30x", "161.0", "73.3")


def check_forward_table(block):
    """x floor = sampler / floor, x floor (median) = median / median floor, floor = weights / the best GB/s, and
    the two speedups are the no-cache times over the best sampler time."""
    header, *rows = markdown_rows(block)
    assert header[:9] == ["size", "weights", "GB/s (range)", "floor", "sampler, best", "x floor", "floor (median)",
                          "sampler, median", "x floor (median)"], header
    assert rows, "one row per size"
    for size, weights, rates, floor, best, x_best, median_floor, median, x_median, no_cache, speedup, pico, \
            pico_speedup in rows:
        assert consistent(x_best, best, floor), size
        assert consistent(x_median, median, median_floor), size
        megabytes, rounding = (value / 1e6 for value in measured(weights))  # MB / (GB/s) = ms
        assert consistent(floor, (megabytes, rounding), rates.split("-")[1]), size
        for time, ratio in ((no_cache, speedup), (pico, pico_speedup)):
            assert time == ratio == "-" or consistent(ratio, time, best), size


def check_forward_breakdown(block):
    """Each column: the derived lines are differences of the measured ones, and each share is its line over the
    step through the sampler."""
    header, *rows = markdown_rows(block)
    assert re.fullmatch(r"ms \(best of \d+\)", header[0]), header[0]
    lines = {row[0]: row[1:] for row in rows}
    for column in range(len(header) - 1):
        ms = {name: measured(cells[column])[0] for name, cells in lines.items()}
        step = lines["= step through the sampler"][column]
        timed_in = ms.get("= the step they were timed in", ms["= model function step"])  # (older tables: the step)
        rest = timed_in - ms["block matrix products"] - ms["LM head (x @ wte.T)"] \
            - ms.get("attention over the cache", 0.0) - ms["logits_to_probs (greedy)"]  # older tables: in the rest
        assert ms["rest of the forward pass"] == pytest.approx(rest, abs=0.025)
        loop = ms["= step through the sampler"] - ms["= model function step"] - ms["_check_probs + _sample"]
        assert ms["sampler loop, the rest"] == pytest.approx(loop, abs=0.02)
        for name, cells in lines.items():
            if "(" in cells[column] and not name.startswith("GB/s"):
                assert consistent(cells[column].split("(")[1], cells[column], step), (name, header[column + 1])


def check_r_table(block):
    header, *rows = markdown_rows(block)
    assert header[:3] == ["r(m)", "1", "2"] and rows
    assert all(row[1] == "1.00" for row in rows), "r(1) is a pass over the one of its own"


def check_context_table(block):
    """Each label's ratio row is its median row over the median at the first length, and the sentence below
    quotes the last ratio of each."""
    header, *rows = markdown_rows(block)
    medians = {row[0].split(", ", 2)[2]: row[1:] for row in rows if row[0].startswith("ms/token, median, ")}
    ratios = {row[0].split(", ", 1)[1]: row[1:] for row in rows if row[0].startswith("median / median at ")}
    assert medians and medians.keys() == ratios.keys(), rows
    for label, cells in ratios.items():
        assert cells[0] == "1.00"
        for ratio, median in zip(cells, medians[label]):
            assert consistent(ratio, median, medians[label][0]), label
        sentence = " ".join(block.split())
        quoted = re.search(rf"([\d.]+)× with {label}\b", sentence)  # three decimals, or the table's two
        # the same ratio, the sentence's to three decimals and the cell's to two: 1.335 may print as 1.34 or 1.33
        assert quoted and consistent(cells[-1], (float(quoted.group(1)), 0.0005), (1.0, 0.0)), label


def check_loading_table(block):
    """× the weights = peak / weights, load / `cat` = load / cat, copy / `cat` = copy / cat, and the sentence
    counts the rows."""
    header, *rows = markdown_rows(block)
    assert header == ["size", "layout", "weights", "peak resident memory", "× the weights",
                      "× above an empty Python", "load", "`cat` (warm)", "load / `cat`", "copy into fresh memory",
                      "copy / `cat`"], header
    for size, layout, weights, peak, x_weights, _, load, cat, x_cat, copy, x_copy in rows:
        assert consistent(x_weights, peak, weights), (size, layout)
        assert consistent(x_cat, load, cat), (size, layout)
        assert consistent(x_copy, copy, cat), (size, layout)
    counts = re.findall(r"by (\d+)\s+of\s+(?:these\s+)?(\d+)", " ".join(block.split()))
    assert [int(of) for _, of in counts] == [len(rows)] * 2, counts


def check_design_table(block):
    """other / gpt2.py's = the other way's time over gpt2.py's."""
    header, *rows = markdown_rows(block)
    assert header[1:] == ["gpt2.py's way", "time", "the other way", "time", "other / gpt2.py's"], header
    for what, _, mine, _, theirs, ratio in rows:
        assert consistent(ratio, theirs, mine), what


def check_peer_speed(block):
    """Either the one line that says it was skipped and how to install the peer, or a table whose last column
    is the peer's ms/token over this repository's."""
    from tools.measured_parts import PEER_INSTALL

    if "skipped" in block:
        assert PEER_INSTALL in " ".join(block.split())
        return
    _, *rows = markdown_rows(block)
    for size, theirs, mine, ratio in rows:
        assert consistent(ratio, theirs, mine), size


def check_llama_cpp(block):
    """Either the one line that says it was skipped and how to install the extras, or the speed table whose
    quotient rows are this project's cells over llama.cpp's, the goal sentence that quotes the decode ones, and
    (in a run of both thread counts) the sentence of what the second core takes off each part, whose quotients
    are its own 2-thread ms over 1-thread ms and which names the part with the highest."""
    from tools.compare_llama_cpp import INSTALL, OURS, THEIRS

    if "skipped" in block:
        assert INSTALL in " ".join(block.split())
        return
    table = next(chunk for chunk in block.split("\n\n") if chunk.startswith("| threads |"))
    header, *rows = markdown_rows(table)
    assert header[:4] == ["threads", "implementation", "decode, ms/token", "1-position pass, ms"], header
    goal = " ".join(block.split())
    for ours, theirs, quotient in zip(rows[0::3], rows[1::3], rows[2::3]):
        assert [ours[1], theirs[1], quotient[1]] == [OURS, THEIRS, f"{OURS} / {THEIRS}"] and ours[0] == quotient[0]
        for column in range(2, len(header)):
            assert consistent(quotient[column], ours[column], theirs[column]), (quotient[0], header[column])
        assert f"{quotient[2]} with {quotient[0]}" in goal, quotient[0]
    if "What the second core takes off" in goal:  # each part: ms with 1 thread -> with 2 (2 over 1); the highest named
        parts = re.findall(r"(?:: |, )([^:,]+?) ([\d.]+) → ([\d.]+) \(([\d.]+)\)", goal.split("What the second core")[1])
        assert len(parts) == 4, parts
        for name, one, two, quotient in parts:
            assert consistent(quotient, two, one), name
        assert f"It takes least off the {max(parts, key=lambda part: float(part[3]))[0]}." in goal


def check_pass_table(block):
    """tools/pass_parts.py's table: r(m) is the row's ms over the m = 1 row's, calibrate's r(1) is 1, and the goal
    column says "met" exactly when both r(m) and calibrate's are within its goal, else by how much the worse
    misses; where the table has the fastest pass on one route, "r(m) / it" is r(m) over its r."""
    table = block.split("\n\n")[1]
    header, *rows = markdown_rows(table)
    assert header[:5] == ["m", "r(m)", "calibrate()", "goal", "ms"], header
    one_ms = rows[0][4]
    assert rows[0][2] == "1.00"
    for m, r, calibrated, goal, ms, *rest in rows:
        assert consistent(r, ms, one_ms), m
        if header[5:7] == ["one route, best", "r(m) / it"]:  # the fastest pass on one route, and r(m) over it
            assert consistent(rest[1], r, rest[0]), m
        if goal:
            limit, worst = float(goal.split(":")[0].lstrip("≤ ")), max(float(r), float(calibrated))
            assert goal.endswith("met") == (worst <= limit), (m, goal)
            assert goal.endswith("met") or goal.endswith(f"missed by {worst - limit:.2f}"), (m, goal)


CHECKS = {"forward-table": check_forward_table, "forward-breakdown": check_forward_breakdown,
          "r-table": check_r_table, "context-table": check_context_table, "loading-table": check_loading_table,
          "peer-speed": check_peer_speed, **{f"design-timing-{kind}": check_design_table for kind in KINDS},
          **{f"pass-timing-{kind}": check_pass_table for kind in KINDS},
          **{f"llama-cpp-{kind}": check_llama_cpp for kind in KINDS}}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_measured_table_agrees_with_itself(name):
    block = generated_block(name)
    if block.startswith(NOT_MEASURED):  # a kind no figures run has measured yet: the one sentence, no figure
        assert name.endswith(tuple(KINDS)) and not re.search(r"\d\.\d", block), block
        return
    CHECKS[name](block)


def test_the_readmes_machine_kinds_table_is_what_both_llama_cpp_parts_measured():
    """Each kind's row holds its llama-cpp-KIND part's r(2..16) on 2 threads, this project's and llama.cpp's, and
    the decoding step's quotient on 1 and 2 threads, as kinds_table reads them from the part."""
    from tools.measured_parts import kinds_table

    parts = {kind: generated_block(f"llama-cpp-{kind}") for kind in KINDS}
    assert generated_block("machine-kinds").split("\n\n")[0] == kinds_table(parts)  # (then --only's note, if any)
    for kind, name in KINDS.items():
        if "| 2 threads | this project |" in parts[kind]:
            table = next(chunk for chunk in parts[kind].split("\n\n") if chunk.startswith("| threads |"))
            ours = next(row for row in markdown_rows(table) if row[:2] == ["2 threads", "this project"])
            assert f"| {name} | " in generated_block("machine-kinds") and " / ".join(ours[4:]) in generated_block(
                "machine-kinds"), kind


def test_the_forward_summary_quotes_the_tables_ratios():
    """The best-run span of the summary is the span of the table's x floor column."""
    from tools.pages import span

    _, *rows = markdown_rows(generated_block("forward-table"))
    best = span([float(row[5].rstrip("x")) for row in rows])
    assert f"The best runs are {best}× the strict floor" in " ".join(generated_block("forward-summary").split())


def test_the_forward_summary_gives_the_rest_of_the_pass_in_a_step_and_over_the_same_work_alone():
    """Its ms in a step span the breakdown's "rest of the forward pass" row; its ratios are that row over "the same
    rest, alone", column by column (the table's rounding: within 0.03)."""
    from tools.pages import span

    lines = {row[0]: row[1:] for row in markdown_rows(generated_block("forward-breakdown"))[1:]}
    in_step, alone = ([measured(cell)[0] for cell in lines[name]] for name in ("rest of the forward pass",
                                                                             "the same rest, alone"))
    summary = " ".join(generated_block("forward-summary").split())
    said = re.search(r"takes ([\d.–]+) ms in a step, ([\d.]+)(?:–([\d.]+))?× what the same work takes alone",
                     summary)
    assert said and said[1] == span(in_step), summary
    ratios = [a / b for a, b in zip(in_step, alone)]
    assert float(said[2]) == pytest.approx(min(ratios), abs=0.03)
    assert float(said[3] or said[2]) == pytest.approx(max(ratios), abs=0.03)


def test_a_kind_with_no_llama_cpp_run_yet_says_so_in_the_machine_kinds_table():
    """kinds_table reads only a part with both tables' rows; an empty or skipped part is 'not measured yet'."""
    from tools.measured_parts import kinds_table

    table = kinds_table({"avx512": generated_block("llama-cpp-avx512"), "avx2": ""})
    rows = {row[0]: row for row in markdown_rows(table)[1:]}
    assert rows["AVX2"][1] == "not measured yet" and rows["AVX-512, AMD"][1] == "not measured yet"
    assert re.fullmatch(r".+, \d{4}-\d\d-\d\d", rows["AVX-512, Intel"][1])
