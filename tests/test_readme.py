"""The README and EXERCISES.md say what the code does: their numbers are the scripts' output, their links land.

What a test can check about prose: that a block the README shows as a script's output is that output, that
the numbers a learner is told to recompute come out, that links to lines of code land on the code they name,
and that counts quoted in EXERCISES.md are the counts in the tests.
"""

import re
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "img"))
import worked_round  # noqa: E402  (img/ is not a package)

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
EXERCISES = (REPO_ROOT / "EXERCISES.md").read_text(encoding="utf-8")


def generated_block(text, name):
    """The text between `<!-- name: begin ... -->` and `<!-- name: end -->`, without a ```text fence."""
    match = re.search(rf"<!-- {name}: begin[^>]*-->\n(.*?)<!-- {name}: end -->", text, re.S)
    assert match, f"the README has no block marked {name}"
    return re.sub(r"^```\w*\n|```\n?$", "", match.group(1).strip() + "\n", flags=re.M).strip()


def test_the_worked_round_in_the_readme_is_what_img_worked_round_py_prints():
    assert generated_block(README, "worked-round") == worked_round.report(worked_round.worked_rounds())


def test_the_worked_round_follows_the_rules_it_illustrates():
    """Recomputed from the tables: beta = sum min(p, q), the residual (q - p)+ sums to 1 - beta, a guess is kept
    exactly when u < min(1, q/p), and a round writes its kept guesses plus one token (residual or bonus)."""
    rounds = worked_round.worked_rounds()
    assert [rnd["origins"] for rnd in rounds] == [["draft", "residual"], ["draft", "draft", "bonus"]]
    for rnd in rounds:
        for check in rnd["checks"]:
            assert check["kept"] == (check["u"] < min(1.0, check["q"] / check["p"]))
        residual = rnd["residual"]
        if residual is not None:
            p, q = residual["p"], residual["q"]
            assert residual["beta"] == pytest.approx(np.minimum(p, q).sum())
            assert residual["unnormalised"].sum() == pytest.approx(1 - residual["beta"])
            assert residual["normalised"] == pytest.approx(np.maximum(q - p, 0) / (1 - residual["beta"]))
    first = rounds[0]["residual"]
    assert first["beta"] == pytest.approx(0.5) and first["normalised"] == pytest.approx([0.8, 0.2, 0.0])


def test_the_worked_round_uses_the_exactness_tests_tables():
    try:
        from markov import DRAFT_TABLE, TARGET_TABLE
    except ImportError:
        from test_speculative_exactness import DRAFT_TABLE, TARGET_TABLE
    assert np.array_equal(worked_round.TARGET_TABLE, TARGET_TABLE)
    assert np.array_equal(worked_round.DRAFT_TABLE, DRAFT_TABLE)


def test_line_links_land_on_the_code_their_text_names():
    """A link like [`_accept`](sampling.py#L419) must point at a line holding `_accept`: line numbers go stale
    whenever a file above them changes, and a learner following a stale link reads the wrong function."""
    links = re.findall(r"\[`([^`]+)`[^\]]*\]\((\w+\.py)#L(\d+)\)", README)
    assert links, "expected line links into the code"
    for name, path, line in links:
        lines = (REPO_ROOT / path).read_text(encoding="utf-8").splitlines()
        assert int(line) <= len(lines) and name in lines[int(line) - 1], (
            f"{path}#L{line} should show {name!r}; it shows {lines[int(line) - 1] if int(line) <= len(lines) else 'nothing'!r}")


def test_the_glossary_defines_the_terms_the_issue_found_undefined():
    glossary = README.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    for term in ("α (alpha)", "KV cache", "memory-bound", "the floor", "OpenBLAS repacking", '"never"'):
        assert term in glossary, term


def test_exercises_quote_the_number_of_texts_the_tiktoken_comparison_runs():
    """Step 5 says how many texts the encoder is compared with tiktoken on: the size of test_encoder's CORPUS."""
    test_encoder = pytest.importorskip("test_encoder")
    assert f"on {len(test_encoder.CORPUS)} texts" in EXERCISES
    assert f"compared on {len(test_encoder.CORPUS)} cases" in README
