"""The forward pass's tables and plots: tools/benchmark_forward.py's measurements, printed and as the pages hold them.

Read tools/benchmark_forward.py first (what is measured: SizeResult, ContextResult). Each table prints as aligned
text, or with markdown=True as docs/BENCHMARKS.md holds it (tools/measured_parts.py makes the page's parts with
them); r(m) is a pass over m positions against one over 1 (`r_of_m`).
"""

import numpy as np

from tools import benchmark
from tools.benchmark_plots import save


def r_of_m(seconds_by_m: dict, statistic) -> dict:
    """{m: statistic(times of m-position passes) / statistic(times of 1-position passes)}.

    r_of_m({1: [2, 3], 2: [3, 5]}, min) == {1: 1.0, 2: 1.5}
    """
    one = statistic(seconds_by_m[1])
    return {m: float(statistic(times) / one) for m, times in seconds_by_m.items()}


def format_table(header, rows, markdown=False) -> str:
    """Right-aligned columns, as wide as their widest cell; or a markdown table (markdown=True)."""
    return benchmark.format_table([[str(cell) for cell in row] for row in [header, *rows]], markdown)




def main_table(results, markdown=False) -> str:
    """ms per token of each size against its floor. The markdown table adds the median floor, so that both
    x floor columns can be checked by hand: x floor = sampler / floor, x floor (median) = median / median floor."""
    header = ("size", "weights", "GB/s", "floor", "sampler", "x floor", "median", "x floor", "no cache",
              "speedup", "picoGPT's", "speedup")
    if markdown:
        header = ("size", "weights", "GB/s (range)", "floor", "sampler, best", "x floor", "floor (median)",
                  "sampler, median", "x floor (median)", "no cache", "speedup", "picoGPT's setting", "speedup")
    rows = []
    for res in results:
        best, median = min(res.sampler_steps), float(np.median(res.sampler_steps))
        rows.append((
            res.size, f"{res.weight_bytes / 1e6:.0f} MB",
            f"{min(res.bandwidths) / 1e9:.0f}-{max(res.bandwidths) / 1e9:.0f}",
            f"{res.floor * 1e3:.1f}", f"{best * 1e3:.1f}", f"{best / res.floor:.2f}x",
            *([f"{res.median_floor * 1e3:.1f}"] if markdown else []),
            f"{median * 1e3:.1f}", f"{median / res.median_floor:.2f}x",
            f"{res.no_cache * 1e3:.0f}" if res.no_cache else "-",
            f"{res.no_cache / best:.1f}x" if res.no_cache else "-",
            f"{res.picogpt * 1e3:.0f}" if res.picogpt else "-",
            f"{res.picogpt / best:.1f}x" if res.picogpt else "-",
        ))
    return format_table(header, rows, markdown)


BREAKDOWN = [  # (line, ms of it from a breakdown b and its SizeResult r); "=" lines are sums, not parts
    ("block matrix products", lambda b, r: b["block products, in the step"]),  # timed where the step makes them
    ("block matrix products, alone", lambda b, r: b["block products"]),  # the same, back to back on their own
    ("LM head (x @ wte.T)", lambda b, r: b["LM head, in the step"]),
    ("LM head, alone", lambda b, r: b["LM head"]),
    ("attention over the cache", lambda b, r: b["attention, in the step"]),
    ("attention, alone", lambda b, r: b["attention"]),
    ("rest of the forward pass", lambda b, r: b["model step, its parts timed"] - b["block products, in the step"]
     - b["LM head, in the step"] - b["attention, in the step"] - b["logits_to_probs"]),  # of one step's own parts
    ("the same rest, alone", lambda b, r: b["model step, replayed"] - b["logits_to_probs"]),
    ("logits_to_probs (greedy)", lambda b, r: b["logits_to_probs"]),
    ("= the step they were timed in", lambda b, r: b["model step, its parts timed"]),  # the lines above: its parts
    ("= model function step", lambda b, r: b["model step"]),  # the same step, not timed inside
    ("_check_probs + _sample", lambda b, r: b["_check_probs + _sample"]),
    ("sampler loop, the rest", lambda b, r: b["sampler step"] - b["model step"] - b["_check_probs + _sample"]),
    ("= step through the sampler", lambda b, r: b["sampler step"]),
    ("strict floor", lambda b, r: r.floor),
    ("sampled: logits_to_probs ...", lambda b, r: b["sampled"]),
]
BREAKDOWN_RATES = [  # (line, bytes per second)
    ("GB/s: block products", lambda r: r.block_bytes / r.breakdown["block products, in the step"]),
    ("GB/s: LM head", lambda r: r.head_bytes / r.breakdown["LM head, in the step"]),
    ("GB/s: block products, alone", lambda r: r.block_bytes / r.breakdown["block products"]),
    ("GB/s: LM head, alone", lambda r: r.head_bytes / r.breakdown["LM head"]),
    ("GB/s: best single product", lambda r: max(r.bandwidths)),
]


def breakdown_table(results, markdown=False, rounds=None) -> str:
    """One column per size: ms of each part of a step, and what share of the sampler's step it is.

    rounds: how many rounds each best was taken over, for the header ("ms (best of 7)"); None: "ms (best)".
    """
    header = [f"ms (best of {rounds})" if rounds else "ms (best)"] + [res.size for res in results]
    rows = []
    for name, part in BREAKDOWN:
        cells = [name]
        for res in results:
            ms = part(res.breakdown, res) * 1e3
            share = f"{ms / (res.breakdown['sampler step'] * 1e3):.0%}".rjust(0 if markdown else 4)
            cells.append(f"{ms:.2f} ({share})" if not name.startswith(("=", "strict", "sampled")) else f"{ms:.2f}")
        rows.append(cells)
    rows += [[name] + [f"{rate(res) / 1e9:.1f}" for res in results] for name, rate in BREAKDOWN_RATES]
    return format_table(header, rows, markdown)


def r_table(results, markdown=False) -> str:
    ms = sorted(results[0].pass_seconds)
    header = ["r(m)"] + [str(m) for m in ms]
    rows = []
    for res in results:
        for label, statistic in (("best", min), ("median", np.median)):
            r = r_of_m(res.pass_seconds, statistic)
            rows.append([f"{res.size} {label}"] + [f"{r[m]:.2f}" for m in ms])
    return format_table(header, rows, markdown)


def context_medians(context) -> dict:
    """{context length: median seconds of a step} of a ContextResult."""
    return {length: float(np.median(times)) for length, times in sorted(context.seconds.items())}


def context_table(context) -> str:
    """A ContextResult's ms per token at each context length, median and best, and the medians over the first."""
    lengths = sorted(context.seconds)
    medians = context_medians(context)
    bests = {length: min(context.seconds[length]) for length in lengths}
    header = [f"{context.size}: context"] + [str(length) for length in lengths]
    rows = [["ms/token, median"] + [f"{medians[n] * 1e3:.1f}" for n in lengths],
            ["ms/token, best"] + [f"{bests[n] * 1e3:.1f}" for n in lengths],
            [f"median / median at {lengths[0]}"] + [f"{medians[n] / medians[lengths[0]]:.2f}" for n in lengths]]
    return format_table(header, rows)


def context_table_by_label(contexts: dict, markdown=False) -> str:
    """Several measurements of the same size at the same lengths ({label: ContextResult}, e.g. one per OpenBLAS
    thread count) in one table: for each, the median ms per token and the medians over the one at the first
    length."""
    first = next(iter(contexts.values()))
    lengths = sorted(first.seconds)
    header = [f"{first.size}: context"] + [str(length) for length in lengths]
    rows = []
    for label, context in contexts.items():
        medians = context_medians(context)
        rows += [[f"ms/token, median, {label}"] + [f"{medians[n] * 1e3:.1f}" for n in lengths],
                 [f"median / median at {lengths[0]}, {label}"]
                 + [f"{medians[n] / medians[lengths[0]]:.2f}" for n in lengths]]
    return format_table(header, rows, markdown)


def threads_label(threads) -> str:
    """'1 thread', '2 threads': how a table names an OpenBLAS thread count."""
    return f"{threads} thread" + ("" if threads == 1 else "s")


def plot_r_of_m(plt, results, path):
    fig, ax = plt.subplots(figsize=(6, 4))
    ms = sorted(results[0].pass_seconds)
    for res in results:
        medians, bests = r_of_m(res.pass_seconds, np.median), r_of_m(res.pass_seconds, min)
        (line,) = ax.plot(ms, [medians[m] for m in ms], "o-", label=f"{res.size} (median)")
        ax.plot(ms, [bests[m] for m in ms], ":", color=line.get_color(), label=f"{res.size} (best)")
    ax.plot(ms, ms, "--", color="gray", linewidth=0.8, label="r = m (compute-bound)")
    ax.axhline(1, color="black", linewidth=0.8, label="r = 1 (memory-bound)")
    ax.set(xlabel="m, positions in one pass", ylabel="r(m) = time(m positions) / time(1)", xticks=ms,
           ylim=(0, max(4.0, max(max(r_of_m(res.pass_seconds, np.median).values()) for res in results) * 1.1)),
           title="r(m): the cost of an m-position pass")
    ax.legend(fontsize=8)
    save(plt, fig, path)


def plot_context(plt, contexts: dict, floor, path):
    """ms per token against the context length: the median and the best of each {label: ContextResult}."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, context in contexts.items():
        lengths = sorted(context.seconds)
        (line,) = ax.plot(lengths, [np.median(context.seconds[n]) * 1e3 for n in lengths], "o-",
                          label=f"median, {label}")
        ax.plot(lengths, [min(context.seconds[n]) * 1e3 for n in lengths], "s:", color=line.get_color(),
                label=f"best, {label}")
    if floor is not None:
        ax.axhline(floor * 1e3, color="gray", linestyle="--", label="strict floor (weights only)")
    ax.set(xlabel="tokens of context", ylabel="ms per token", ylim=(0, None),
           title=f"{next(iter(contexts.values())).size}: a cached decoding step against the context length")
    ax.legend(fontsize=8)
    save(plt, fig, path)
