"""`python main.py --html FILE`: the run's rounds as ONE self-contained web page, every number one click away.

Read show.py first (the terminal's colors, trace and picture read the same records.Round records), then
command_line/report.py (the summary's words). The page answers, for any round, "why was this guess rejected,
and where did the replacement come from?": each checked guess with p(x) and q(x) as bars, the draw u against
min(1, q/p), kept or rejected; after a rejection the residual (q − p)₊'s most likely tokens and the one drawn;
the bonus token's row; a tree's nodes and the path kept; prompt lookup's match; K=auto's expected rates.

How it is built: Python gathers the numbers into one JSON document (`page_data`); page.html (beside this file)
holds the page's CSS and JavaScript, and `page_html` puts the document inside it, in a
<script type="application/json"> element. The script builds the page from it with textContent only, never as
markup, so a token `</script>`, `<div>`, a newline or a right-to-left mark shows as text. JSON escapes what
could end the element: `<`, `>` and `&` are written \\u003c, \\u003e, \\u0026, and ensure_ascii writes every
other non-ASCII character (U+2028, U+2029, a lone surrogate) as \\uXXXX. No network: it opens from file://.

What the rows cost: a Round keeps the target's rows q at its written positions and the drafter's rows p; the
page keeps only the few most likely tokens of the row a round's last token was drawn from (TOP tokens), so a
round costs a few hundred bytes (the README's "Watching the rounds" says what 1,000 rounds cost, measured).

Worked example: a chain round with K = 2 that kept guess 1 and rejected guess 2 becomes
    {"i": 1, "k": 2, "drafted": [0, 2], "checks": [[1, 0, 0.2, 0.6, 0.375, true], [2, 2, 0.5, 0.0, 0.229, false]],
     "tokens": [0, 1], "origins": "dr", "row": {"from": "residual", "top": [[0, 0.8], [1, 0.2]], ...}}
(checks: draft position, token, p, q, u, kept; origins: d = kept guess, r = residual, b = bonus).
"""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import drafters
import lookahead
from command_line.flags import errors_as_one_line
from command_line.report import acceptance_by_position, drafter_text, greedy_text_line, lookahead_text
from loaders.safe_files import write_atomically

TEMPLATE = Path(__file__).with_name("page.html")
TOP = 5  # the most likely tokens of a row that the page keeps
ORIGIN_LETTERS = {"draft": "d", "residual": "r", "bonus": "b"}
JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


# ------------------------------------------------------------------------------------------------------------
# The rows a round's last token was drawn from
# ------------------------------------------------------------------------------------------------------------


def tree_nodes_of_checks(proposal, checks):
    """The proposal node each check tested: walk down from x, a kept check's node becoming the next parent.

    Siblings are distinct tokens (a tree's candidates are the draft's top tokens), so a check's node is the
    child of the current parent with its token. chain: tree_nodes_of_checks(P([7, 8], [-1, 0]), ...) == [0, 1].
    """
    nodes, parent = [], -1
    for check in checks:
        node = next(i for i, (token, up) in enumerate(zip(proposal.tokens, proposal.parents))
                    if up == parent and token == check.token)
        nodes.append(node)
        parent = node if check.kept else parent
    return nodes


def final_row(rnd):
    """(q row, where it came from) that the round's last token was drawn from, or (None, None) without rows.

    A bonus token: the target's row q after the kept guesses. A residual token: q at the rejected position
    made normalise((q - p)_+) for each rejected guess there in turn (a chain has one; a tree's siblings each
    take their one-hot row off, SpecInfer's rule), as sampling._residual does, q itself if nothing is left.
    """
    if rnd.target_rows is None or not rnd.tokens:
        return None, None
    row = np.asarray(rnd.target_rows[len(rnd.tokens) - 1], dtype=np.float64)  # [n_vocab]
    if rnd.origins[-1] != "residual":
        return row, "bonus"
    nodes = tree_nodes_of_checks(rnd.proposal, rnd.checks)
    depth = len(rnd.tokens)  # the rejected guesses all sit at the depth of the last written token
    for check, node in zip(rnd.checks, nodes):
        if check.depth == depth and not check.kept:
            residual = np.maximum(row - np.asarray(rnd.proposal.rows[node]), 0.0)  # (q - p)_+ [n_vocab]
            row = residual / residual.sum() if residual.sum() > 0 else row
    return row, "residual"


def top_tokens(row, n=TOP):
    """[[token, probability to 4 significant digits]] of the n most likely tokens of row, most likely first."""
    order = np.argsort(-row, kind="stable")[:n]  # [n]
    return [[int(token), float(f"{row[token]:.4g}")] for token in order if row[token] > 0]  # 4 digits: bars


# ------------------------------------------------------------------------------------------------------------
# One round, and what K=auto and prompt lookup add to it
# ------------------------------------------------------------------------------------------------------------


def round_data(rnd):
    """The JSON of one Round (see the module docstring's example)."""
    data = {"i": rnd.index, "k": rnd.k, "drafted": [int(t) for t in rnd.proposal.tokens],
            "checks": [[c.depth, int(c.token), c.p, c.q, c.u, bool(c.kept)] for c in rnd.checks],
            "tokens": [int(t) for t in rnd.tokens], "origins": "".join(ORIGIN_LETTERS[o] for o in rnd.origins)}
    if list(rnd.proposal.parents) != list(range(-1, len(rnd.proposal.tokens) - 1)):  # a tree
        data["parents"] = [int(parent) for parent in rnd.proposal.parents]
        data["nodes"] = tree_nodes_of_checks(rnd.proposal, rnd.checks)
    row, source = final_row(rnd)
    if row is not None:
        drawn = rnd.tokens[-1]
        data["row"] = {"from": source, "top": top_tokens(row), "drawn": [int(drawn), float(f"{row[drawn]:.4g}")]}
    return data


def auto_k_policy(flags, costs):
    """A lookahead.AutoK that plans as the run's did: the run's drafter cost c and r(m) (None unless K=auto)."""
    if flags.K != "auto" or flags.tree is not None:
        return None
    if flags.drafter == "lookup":
        drafter = drafters.prompt_lookup(flags.max_ngram, flags.min_ngram)
    else:
        drafter = SimpleNamespace(cost=getattr(costs, "c", None))
    target = SimpleNamespace(r_table=getattr(costs, "r_table", None))
    k_max = max(1, min(lookahead.AUTO_K_MAX, flags.n_tokens_to_generate - 1))
    return lookahead.AutoK(drafter, target, k_max)


def annotate(rounds_data, rounds, prompt_ids, flags, costs):
    """Add prompt lookup's match ("match": [n, end]) and K=auto's plan ("auto": rates by k, the match length)
    to each round's data, replaying the run: a fresh lookup and AutoK see the same text and learn the same."""
    lookup = drafters.prompt_lookup(flags.max_ngram, flags.min_ngram) if flags.drafter == "lookup" else None
    policy = auto_k_policy(flags, costs)
    x = list(prompt_ids)
    for data, rnd in zip(rounds_data, rounds):
        if lookup is not None:
            data["match"] = list(lookup.match(x))  # (n, end): x's last n tokens occurred before, ending at end
        if policy is not None:
            n = policy.drafter.match_length(x) if policy.by_match else None
            rates = [] if n == 0 else policy.expected_rates(n).tolist()  # no match: nothing to propose
            data["auto"] = {"rates": rates, "n": n, "c": policy.c, "r": policy.r}
            policy.record(rnd)
        x += rnd.tokens


# ------------------------------------------------------------------------------------------------------------
# The run, and the page
# ------------------------------------------------------------------------------------------------------------


def summary_data(flags, autoregressive, speculative, n_prompt):
    """The report's numbers and words (command_line/report.py's)."""
    ar, sp = autoregressive.stats, speculative.stats
    by_position, _ = acceptance_by_position(sp, flags)
    return {"ar_seconds": autoregressive.seconds, "sp_seconds": speculative.seconds,
            "speedup": autoregressive.seconds / speculative.seconds if speculative.seconds else None,
            "alpha": sp.acceptance_rate, "kept": sp.accepted, "checked": sp.checked, "by_position": by_position,
            "tokens": sp.tokens, "ar_passes": ar.target_passes, "sp_passes": sp.target_passes,
            "draft_passes": sp.draft_passes, "tokens_per_pass": sp.tokens_per_target_pass,
            "drafter": drafter_text(flags), "target": flags.target_model_size, "lookahead": lookahead_text(flags),
            "temperature": flags.temperature, "top_k": flags.top_k, "top_p": flags.top_p, "seed": str(flags.seed),
            "greedy": greedy_text_line(flags, autoregressive.ids, speculative.ids, n_prompt)}


def page_data(flags, autoregressive, speculative, token_bytes, costs=None):
    """The page's JSON document: the summary, the prompt, every round, and the text of every token named."""
    n_prompt = len(speculative.ids) - speculative.stats.tokens
    prompt_ids = speculative.ids[:n_prompt]
    rounds = [round_data(rnd) for rnd in speculative.rounds]
    annotate(rounds, speculative.rounds, prompt_ids, flags, costs)
    named = set(speculative.ids) | {t for data in rounds for t in data["drafted"]}
    named |= {entry[0] for data in rounds for entry in data.get("row", {}).get("top", [])}
    vocab = {str(token): token_text(token_bytes(token)) for token in sorted(named)}
    return {"summary": summary_data(flags, autoregressive, speculative, n_prompt), "prompt": prompt_ids,
            "rounds": rounds, "vocab": vocab, "drafter": flags.drafter, "tree": flags.tree is not None}


def token_text(data):
    """A token's bytes as text: UTF-8 where they are UTF-8, each other byte as \\xNN (GPT-2 splits characters
    over tokens, so a token may hold half of one)."""
    return data.decode("utf-8", errors="backslashreplace")


def json_for_script(document):
    """JSON that cannot end or open an HTML element: ASCII only, with <, > and & as \\u escapes.

    >>> json_for_script({"t": "</script>"})
    '{"t":"\\\\u003c/script\\\\u003e"}'
    """
    text = json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return "".join(JSON_ESCAPES.get(char, char) for char in text)


def page_html(document):
    """The whole page: page.html with the JSON document in its data element."""
    return TEMPLATE.read_text(encoding="utf-8").replace("/*RUN*/{}", json_for_script(document), 1)


def write_page(flags, autoregressive, speculative, token_bytes, costs=None):
    """With --html FILE, write the page of the speculative run there and say so; else nothing."""
    if flags.html is None:
        return
    document = page_data(flags, autoregressive, speculative, token_bytes, costs)
    with errors_as_one_line():  # --html was checked before the run; a disk that filled since is one line too
        write_atomically(flags.html, page_html(document))
    print(f"the rounds are on a page in {flags.html}: open it in a browser")

