"""command_line/page.py: the rounds' web page, checked in a real browser (headless Chromium) from its DOM.

Read command_line/page.py first. The runs are speculative sampling on the Markov tables of tools/markov.py
(three tokens, exact numbers, fast), whose tokens are made to stand for hostile text: `<script>`, `</div>` and
a newline, a right-to-left mark with bytes that are no UTF-8 (an encoded lone surrogate). The browser loads the
page from file:// with --dump-dom, which prints the DOM after the page's scripts ran; html.parser reads it.
Without Chromium (Debian's `chromium` package) the browser tests skip, saying so; in CI (CI=true) they fail.
"""

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pytest

import drafters
import main
import sampling
from command_line import page
from command_line.report import Run
from conftest import REPO_ROOT, in_ci
from records import AutoregressiveStats, SpeculativeStats
from tools.markov import DRAFT_TABLE, TARGET_TABLE, markov_model

HOSTILE = {0: b"<script>alert(1)</script>", 1: b"</div>\n", 2: b"\xe2\x80\x8f\xed\xa0\x80&amp;"}  # RLM, a surrogate


def token_bytes(token):
    return HOSTILE[token]


def flags_of(**changes):
    """The flags page.py reads, as main.py's check_flags would give them for a run like these."""
    settings = dict(K=3, tree=None, drafter="model", max_ngram=None, min_ngram=1, n_tokens_to_generate=40,
                    temperature=1.0, top_k=None, top_p=None, seed=7, draft_model_size="markov draft",
                    target_model_size="markov target", html=None)
    return SimpleNamespace(**{**settings, **changes})


def markov_runs(flags, draft=None, prompt=(0, 1)):
    """(autoregressive Run, speculative Run) of the Markov target, as main.py makes them (seconds made up)."""
    target = markov_model(TARGET_TABLE)
    draft = markov_model(DRAFT_TABLE) if draft is None else draft
    N, ar_stats, sp_stats = flags.n_tokens_to_generate, AutoregressiveStats(), SpeculativeStats()
    ids = sampling.autoregressive_sampling(list(prompt), target, N, np.random.default_rng(flags.seed), stats=ar_stats)
    rng = np.random.default_rng(flags.seed)
    if flags.tree is not None:
        stream = drafters.tree_speculative_stream(list(prompt), draft, target, N, flags.tree, rng, stats=sp_stats)
    else:
        stream = sampling.speculative_stream(list(prompt), draft, target, N, flags.K, rng, stats=sp_stats)
    rounds = list(stream)
    sp_ids = list(prompt) + [token for rnd in rounds for token in rnd.tokens]
    return Run(ids, 0.5, ar_stats, None), Run(sp_ids, 0.25, sp_stats, rounds)


# ------------------------------------------------------------------------------------------------------------
# The browser, and reading the DOM it printed
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    """The path of Chromium, or a skip (a failure in CI) that says how to get it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "needs Chromium for the page's browser tests: apt-get install chromium (CI installs it)"
        if in_ci():
            pytest.fail("CI=true and " + reason)
        pytest.skip(reason)
    return found


def dom_after_scripts(chromium, path, fragment=""):
    """The page's DOM after its scripts ran, as headless Chromium prints it (`--dump-dom`)."""
    result = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                             "--user-data-dir=" + str(path.parent / "chromium-profile"),
                             "--dump-dom", path.resolve().as_uri() + fragment],
                            capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


class Elements(HTMLParser):
    """Every element of a DOM as (tag, attrs, its text) in document order; text includes its descendants'."""

    def __init__(self, dom):
        super().__init__(convert_charrefs=True)
        self.found, self.open = [], []
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        element = [tag, dict(attrs), ""]
        self.found.append(element)
        if tag not in ("meta", "br", "input", "img", "link"):
            self.open.append(element)

    def handle_endtag(self, tag):
        while self.open and self.open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        for element in self.open:
            element[2] += data

    def select(self, tag=None, **attrs):
        """The elements with this tag (any: None) whose attributes include attrs (class_ for class, a word)."""
        wanted = {key.rstrip("_").replace("_", "-"): value for key, value in attrs.items()}

        def matches(element_attrs, key, value):
            if key == "class":
                return value in (element_attrs.get("class") or "").split()
            return element_attrs.get(key) == value
        return [e for e in self.found if (tag is None or e[0] == tag)
                and all(matches(e[1], key, value) for key, value in wanted.items())]


def written_page(tmp_path, flags, runs, costs=None):
    """The page of these runs, written to tmp_path/rounds.html; its path."""
    path = tmp_path / "rounds.html"
    path.write_text(page.page_html(page.page_data(flags, *runs, token_bytes, costs)), encoding="utf-8")
    return path


def checks_on(elements):
    """[(depth, token, p, q, u, kept)] of the check elements given, from their data- attributes (exact)."""
    return [(int(a["data-depth"]), int(a["data-token"]), float(a["data-p"]), float(a["data-q"]), float(a["data-u"]),
             a["data-kept"] == "true") for _, a, _ in elements]


def recorded(rnd):
    return [(c.depth, c.token, c.p, c.q, c.u, c.kept) for c in rnd.checks]


# ------------------------------------------------------------------------------------------------------------
# In the browser
# ------------------------------------------------------------------------------------------------------------


def test_every_round_and_every_check_of_the_run_is_on_the_page_with_its_recorded_numbers(tmp_path, chromium):
    flags = flags_of()
    runs = markov_runs(flags)
    rounds = runs[1].rounds
    dom = Elements(dom_after_scripts(chromium, written_page(tmp_path, flags, runs)))
    assert dom.select("body")[0][1]["data-built"] == str(len(rounds))  # the script ran to its end
    rows = [element for element in dom.select("tr") if "data-round" in element[1]]
    assert [int(a["data-round"]) for _, a, _ in rows] == [rnd.index for rnd in rounds]
    for (_, attrs, _), rnd in zip(rows, rounds):
        assert int(attrs["data-k"]) == rnd.k
        assert attrs["data-tokens"] == ",".join(map(str, rnd.tokens))
        assert attrs["data-origins"] == "".join(page.ORIGIN_LETTERS[o] for o in rnd.origins)
    shown = checks_on(dom.select("span", class_="check"))
    assert shown == [check for rnd in rounds for check in recorded(rnd)] and len(shown) == runs[1].stats.checked
    assert len([button for button in dom.select("button") if "data-round" in button[1]]) == len(rounds)
    summary = dom.select("div", id="summary")[0][2]
    assert f"{runs[1].stats.acceptance_rate:.2f} ({runs[1].stats.accepted} of {runs[1].stats.checked} checked" in summary
    assert "2.00x (wall time, autoregressive / speculative)" in summary  # 0.5 s / 0.25 s


def test_selecting_a_round_by_keyboard_shows_it(tmp_path, chromium):
    """#keys=... makes the page press those keys on load, through the handler a key press goes through."""
    flags = flags_of()
    runs = markov_runs(flags)
    rounds = runs[1].rounds
    path = written_page(tmp_path, flags, runs)
    for keys, index in (("End,ArrowLeft,ArrowLeft", len(rounds) - 2), ("ArrowRight,ArrowRight,ArrowLeft", 2),
                        ("End,Home,ArrowRight", 2)):
        dom = Elements(dom_after_scripts(chromium, path, "#keys=" + keys))
        section = dom.select("section", id="round")[0]
        assert section[1]["data-round"] == str(index), keys
        assert section[2].startswith(f"Round {index} of {len(rounds)}: k={rounds[index - 1].k}")
        pressed = [int(a["data-round"]) for _, a, _ in dom.select("button", aria_pressed="true")]
        assert pressed == [index]
        assert checks_on(dom.select("tr", class_="check")) == recorded(rounds[index - 1])
        final = dom.select("table", class_="final")[0][1]
        assert final["data-drawn"] == str(rounds[index - 1].tokens[-1])
        assert final["data-from"] == ("residual" if rounds[index - 1].origins[-1] == "residual" else "bonus")


def test_an_adversarial_token_renders_as_text_never_as_markup(tmp_path, chromium):
    flags = flags_of()
    runs = markov_runs(flags)
    dom = Elements(dom_after_scripts(chromium, written_page(tmp_path, flags, runs)))
    assert len(dom.select("script")) == 2  # the page's data and its script: no token made one
    assert len(dom.select("div")) == 3  # the page's own: the summary, the text, the timeline
    text = dom.select("div", id="text")[0][2]
    assert "<script>alert(1)</script>" in text and "</div>\n" in text
    assert "\u200f\\xed\\xa0\\x80&amp;" in text  # the mark as a character, the bytes that are no UTF-8 as \xNN
    chips = " ".join(element[2] for element in dom.select("span", class_="chip"))
    assert '"<U+200F>\\xed\\xa0\\x80&amp;"' in chips and '"</div>↵"' in chips  # chips show invisible characters


def test_main_writes_the_page_and_the_browser_finds_every_round_of_its_report(tmp_path, chromium, release_124M_dir):
    from tools.model_files import write_hf_folder
    from tools.random_models import TINY_HPARAMS, near_params, tiny_params

    target = tiny_params(seed=1)
    target_dir = write_hf_folder(tmp_path / "target", target, TINY_HPARAMS, release_124M_dir)
    draft_dir = write_hf_folder(tmp_path / "draft", near_params(target, np.random.default_rng(5), 0.2), TINY_HPARAMS,
                                release_124M_dir)
    result = subprocess.run([sys.executable, str(REPO_ROOT / "main.py"), "--draft_model_size", draft_dir,
                             "--target_model_size", target_dir, "--n_tokens_to_generate", "16", "--temperature", "1",
                             "--html", "rounds.html", "--color", "never"],
                            cwd=tmp_path, capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "the rounds are on a page in rounds.html: open it in a browser" in result.stdout
    rounds = int(re.search(r"; (\d+) rounds, \d+ target forward passes", result.stdout).group(1))
    kept, checked = map(int, re.search(r"acceptance rate: [\d.]+ \((\d+) of (\d+) checked", result.stdout).groups())
    dom = Elements(dom_after_scripts(chromium, tmp_path / "rounds.html", "#keys=End"))
    assert dom.select("body")[0][1]["data-built"] == str(rounds)
    shown = checks_on(dom.select("span", class_="check"))
    assert (sum(kept for *_, kept in shown), len(shown)) == (kept, checked)
    assert dom.select("section", id="round")[0][1]["data-round"] == str(rounds)


# ------------------------------------------------------------------------------------------------------------
# Without a browser: what the page is made of
# ------------------------------------------------------------------------------------------------------------


def test_the_data_cannot_end_its_element_or_a_javascript_string():
    text = page.json_for_script({"t": "</script><!-- \u2028\u2029 & \udcc3 é"})
    assert not set(text) & set("<>&\u2028\u2029") and text.isascii()
    html = page.page_html({"t": "</script>"})
    assert html.count("</script>") == 2 and "/*RUN*/" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched: no network


def test_the_residual_row_is_the_one_sampling_draws_from():
    """A chain's rejection: normalise((q - p)_+) at the rejected position, as sampling._residual makes it."""
    flags = flags_of()
    rounds = markov_runs(flags)[1].rounds
    rejected = [rnd for rnd in rounds if rnd.origins[-1] == "residual"]
    assert rejected
    for rnd in rejected:
        j = len(rnd.tokens) - 1
        row, source = page.final_row(rnd)
        assert source == "residual"
        np.testing.assert_array_equal(row, sampling._residual(rnd.target_rows[j], rnd.proposal.rows[j]))
        assert row[rnd.tokens[-1]] > 0  # the token drawn is one the residual can give


def test_a_trees_residual_takes_each_rejected_sibling_off_in_turn():
    """A rejected sibling's token is taken off q (SpecInfer's rule): the next sibling's Check.q is read from the
    row without it, and after the last rejection the page's residual row gives none of them."""
    flags = flags_of(tree=(2, 1), K=None)
    rounds = markov_runs(flags)[1].rounds
    both_rejected = 0
    for rnd in rounds:
        nodes = page.tree_nodes_of_checks(rnd.proposal, rnd.checks)
        assert [rnd.proposal.tokens[node] for node in nodes] == [check.token for check in rnd.checks]
        siblings = [check for check in rnd.checks if check.depth == 1]
        if len(siblings) == 2:  # the first was rejected, the second checked against q without it
            q = np.array(rnd.target_rows[0], dtype=np.float64)
            q[siblings[0].token] = 0.0
            assert siblings[1].q == pytest.approx(q[siblings[1].token] / q.sum(), rel=1e-12)
        if len(siblings) == 2 and not siblings[1].kept:
            row, source = page.final_row(rnd)
            assert source == "residual" and row[siblings[0].token] == row[siblings[1].token] == 0
            both_rejected += 1
    assert both_rejected  # some round rejected both siblings


@pytest.mark.parametrize("drafter", ["lookup", "model"])
def test_k_auto_replayed_gives_each_rounds_k_or_says_why_not(drafter):
    """The page's rates replay K=auto: the k of each round is the best rate's, or cut by the tokens left, or
    (a model draft only) a probe after declined rounds."""
    flags = flags_of(K="auto", drafter=drafter, n_tokens_to_generate=60, temperature=0.0)
    draft = drafters.prompt_lookup() if drafter == "lookup" else None
    runs = markov_runs(flags, draft=draft, prompt=(0, 1, 2, 0, 1, 2, 0))
    document = page.page_data(flags, *runs, token_bytes)
    written = 0
    for data, rnd in zip(document["rounds"], runs[1].rounds):
        rates, left = data["auto"]["rates"], flags.n_tokens_to_generate - written - 1
        written += len(rnd.tokens)
        best = int(np.argmax(rates)) if rates else 0
        assert rnd.k == min(best, left) or (drafter == "model" and best == 0 and rnd.k == 1), data
        if drafter == "lookup" and rnd.k:
            assert data["match"][0] == rnd.proposal.match_length


def test_a_page_of_a_thousand_rounds_stays_well_under_a_megabyte():
    flags = flags_of(n_tokens_to_generate=2500, K=4)
    runs = markov_runs(flags)
    assert len(runs[1].rounds) >= 1000
    runs = (runs[0], runs[1]._replace(rounds=runs[1].rounds[:1000]))
    size = len(page.page_html(page.page_data(flags, *runs, token_bytes)).encode())
    assert size < 1_000_000, size


BAD_HTML = [
    (("--html", "no/such/folder/rounds.html"), "--html must name a file in an existing folder, e.g. rounds.html"),
    (("--html", "rounds.txt"), "--html 'rounds.txt': the name must end in .html"),
    (("--html",), "--html needs a value"),
]


@pytest.mark.parametrize("flags, expected", BAD_HTML, ids=[" ".join(f) for f, _ in BAD_HTML])
def test_a_bad_html_flag_gets_one_clear_line_before_any_download(tmp_path, monkeypatch, capsys, flags, expected):
    monkeypatch.setenv("GPT2_BASE_URL", "http://127.0.0.1:9")  # nobody listens: a download could not succeed
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--models_dir", str(tmp_path / "models"), *flags])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "models").exists() and not list(tmp_path.glob("rounds*"))
