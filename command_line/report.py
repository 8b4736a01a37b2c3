"""What main.py prints: the run's heading, each sampler's line, and the comparison at the end.

Read main.py first: it decodes the prompt twice and hands the two runs here. Every word printed by default is
one the README or docs/GLOSSARY.md defines (tests/test_readme.py checks the sample run's words); --verbose adds
what only the machine needs (the routes each matrix product takes).

A run is a `Run`: the token ids (prompt included), its seconds, its statistics (records.py) and, for
speculative sampling, its rounds (records.Round, which show.py draws).
"""

import math
from collections import namedtuple

import show
from command_line.flags import K_POLICIES, errors_as_one_line, tree_nodes, tree_text

Run = namedtuple("Run", "ids seconds stats rounds")  # one sampler's run: what main.py compares


def describe(name, hparams):
    """'355M (24 layers, 1024 wide)'."""
    return f"{name} ({hparams['n_layer']} layers, {hparams['n_embd']} wide)"


def token_bytes_of(encoder):
    """token id -> the bytes it stands for (GPT-2's tokens are byte sequences, written as unicode stand-ins)."""
    return lambda token: bytes(encoder.byte_decoder[char] for char in encoder.decoder[token])


def lookahead_text(flags):
    """'K=4', 'K=auto', 'K=hf', or 'tree 2,2,1 (10 nodes)' (at temperature 0, where the draft's rows are one-hot
    and every node has one candidate: 'tree 2,2,1 (10 nodes; at temperature 0 a chain of 3)')."""
    if flags.tree is not None:
        chain = f"; at temperature 0 a chain of {len(flags.tree)}" if flags.temperature == 0 else ""
        return f"tree {tree_text(flags.tree)} ({tree_nodes(flags.tree, math.inf)} nodes{chain})"
    return f"K={flags.K}"


def tokens(n):
    """"1 token", "10 tokens"."""
    return f"{n} token{'' if n == 1 else 's'}"


def drafter_text(flags):
    """The drafter in words, for the speculative run's heading."""
    if flags.drafter == "lookup":
        longest = "the longest match" if flags.max_ngram is None else f"matches counted up to {flags.max_ngram} tokens"
        return f"drafter lookup (prompt lookup: {longest}, at least {tokens(flags.min_ngram)})"
    if flags.drafter == "staged":
        return f"drafter staged (draft {flags.draft_model_size}, itself drafted by prompt lookup)"
    return f"draft {flags.draft_model_size}"


def print_heading(flags, draft, target, prompt_ids):
    """The models, the settings and the prompt, before anything runs."""
    if draft is not None:
        print(f"draft  {describe(flags.draft_model_size, draft[1])}")
    else:
        print("draft  none: prompt lookup copies guesses from earlier text (--draft_model_size is not used)")
    print(f"target {describe(flags.target_model_size, target[1])}")
    cache_note = "on" if flags.kv_cache else "OFF (every forward pass recomputes the whole sequence, picoGPT's way)"
    print(f"{lookahead_text(flags)}, drafter {flags.drafter}, temperature={flags.temperature}, top_k={flags.top_k}, "
          f"top_p={flags.top_p}, seed={flags.seed}, KV cache {cache_note}")
    print(f"prompt ({tokens(len(prompt_ids))}): {flags.prompt}\n", flush=True)


def print_run_heading(flags, speculative, color=False):
    """The line before a sampler's text (and the colors' legend before speculative sampling's), then the prompt,
    which the sampler's text continues."""
    if not speculative:
        print(f"autoregressive sampling, target {flags.target_model_size} alone:")
    else:
        print(f"speculative sampling, {drafter_text(flags)}, target {flags.target_model_size}, "
              f"{lookahead_text(flags)}:\n{show.legend(color)}")
    print(flags.prompt, end="", flush=True)


def print_run(run, has_draft=True):
    """The line under a sampler's text: its tokens and time, its rounds (rounds None: autoregressive sampling,
    which has none) and its forward passes."""
    stats = run.stats
    rate = f"{stats.tokens} tokens in {run.seconds:.2f} s = {stats.tokens / run.seconds:.2f} tokens/s"
    if run.rounds is None:
        print(f"  {rate}; {stats.target_passes} target forward passes\n", flush=True)
        return
    draft_passes = f"{stats.draft_passes} draft forward passes" if has_draft else "no draft model"
    print(f"  {rate}; {len(run.rounds)} rounds, {stats.target_passes} target forward passes, {draft_passes}\n")


def mean(values):
    """The mean of a list of numbers, 0.0 for an empty one."""
    return sum(values) / len(values) if values else 0.0


def acceptance_by_position(stats, flags):
    """('0.50, 0.25, n/a', 3): the acceptance rate at each draft position 1..K (with K=auto, K=hf or a tree: up
    to the deepest one drafted); n/a where no guess was ever checked."""
    rates = stats.acceptance_rate_at
    while len(rates) > 1 and not stats.drafted_at[len(rates) - 1]:  # positions never even drafted
        rates = rates[:-1]
    if flags.K not in K_POLICIES and flags.tree is None:
        rates = rates + [None] * (flags.K - len(rates))  # a fixed K: positions 1..K, never reached ones n/a
    return ", ".join("n/a" if rate is None else f"{rate:.2f}" for rate in rates), len(rates)


def acceptance_line(stats, flags):
    """'acceptance rate: 0.50 (2 of 4 checked draft tokens kept; by draft position 1..2: 0.50, 0.50)'; where
    no guess was drafted at all (K=auto that chose k = 0 every round), it says so instead of a range 1..0."""
    by_position, n_positions = acceptance_by_position(stats, flags)
    where = f"by draft position 1..{n_positions}: {by_position}" if n_positions else "no guess was drafted"
    return (f"acceptance rate: {stats.acceptance_rate:.2f} ({stats.accepted} of {stats.checked} checked draft "
            f"tokens kept; {where})")


def round_report(flags, stats, rounds):
    """The drafter's lines: rounds and mean k, lookup's matches, a tree's nodes per pass and accepted depths."""
    ks = [rnd.k for rnd in rounds]
    lines = [f"drafter {flags.drafter}, {lookahead_text(flags)}: {len(rounds)} rounds, mean k {mean(ks):.2f}"]
    if flags.drafter == "lookup":
        matched = sum(1 for rnd in rounds if rnd.proposal.tokens)
        share = matched / len(rounds) if rounds else 0.0
        lines[0] += f"; {matched} of {len(rounds)} rounds ({share:.0%}) found a match"
    if flags.tree is not None:
        depths = [sum(origin == "draft" for origin in rnd.origins) for rnd in rounds]
        nodes = sum(len(rnd.proposal.tokens) for rnd in rounds)
        histogram = ", ".join(f"{d}: {depths.count(d)}" for d in range(max(depths, default=0) + 1))
        lines.append(f"tree: {nodes / max(stats.target_passes, 1):.2f} nodes per target pass; accepted paths went "
                     f"{mean(depths):.2f} deep on average, {max(depths, default=0)} at most (rounds by depth: "
                     f"{histogram})")
    return lines


def greedy_text_line(flags, ar_ids, sp_ids, n_prompt):
    """At temperature 0, whether the two texts are the same (they must be: both are the target's greedy text)."""
    if flags.temperature != 0:
        return (f"temperature {flags.temperature}: the two texts are two samples from the same distribution (the "
                f"samplers use the random numbers differently), so they need not be identical")
    if ar_ids == sp_ids:
        return "temperature 0: the two texts are identical: yes (both are the target's greedy text)"
    first = next(i for i, (a, b) in enumerate(zip(ar_ids, sp_ids)) if a != b) - n_prompt
    return (f"temperature 0: the two texts are identical: NO, they part at new token {first}. A multi-token pass "
            f"and a 1-token pass round float32 differently, which can flip a near-tie between the two most likely "
            f"tokens")


def print_summary(flags, n_prompt, autoregressive, speculative, token_bytes, color):
    """After both runs: the trace (--trace), the speedup, the acceptance rate, the target passes, the drafter's
    rounds, whether the greedy texts agree, and the picture of the rounds (--plot)."""
    ar, sp, rounds = autoregressive.stats, speculative.stats, speculative.rounds
    if flags.trace:
        print("\n".join(show.trace_line(rnd, token_bytes, color) for rnd in rounds) + "\n")
    print(f"speedup: {autoregressive.seconds / speculative.seconds:.2f}x (wall time, autoregressive / speculative)")
    print(acceptance_line(sp, flags))
    print(f"target forward passes: autoregressive {ar.target_passes}, speculative {sp.target_passes} "
          f"({sp.tokens_per_target_pass:.2f} tokens per target pass)")
    print("\n".join(round_report(flags, sp, rounds)))
    print(greedy_text_line(flags, autoregressive.ids, speculative.ids, n_prompt))
    if flags.plot is not None:
        names = f"draft {flags.draft_model_size}" if flags.draft_model_size else "prompt lookup"
        title = (f"{len(rounds)} rounds of speculative sampling: {names}, target {flags.target_model_size}, "
                 f"{lookahead_text(flags)}, temperature {flags.temperature}")
        with errors_as_one_line():  # --plot was checked before the run; a disk that filled since is one line too
            show.plot_rounds(rounds, token_bytes, flags.plot, title=title)
        print(f"the rounds are drawn in {flags.plot}")
