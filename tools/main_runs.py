"""The parts made by running main.py itself: the README's sample run and the rounds' page (its size, its picture).

Read tools/make_readme_figures.py first (it calls these) and tools/random_models.py (the random models they run).
main.py runs as a process of its own, as a learner types it, on random weights saved as model folders: the
sample run on the 124M and 355M shapes, the page on two tiny models (the README's trace run, and a long run
whose page is weighed). Headless Chromium takes the page's picture where it is installed.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from command_line.scripts import as_names
from loaders.random_weights import check_memory_for, random_params
from loaders.weights import shown
from tools import benchmark
from tools.model_files import write_hf_folder
from tools.pages import REPO, wrap
from tools.random_models import TINY_HPARAMS, write_random_models, write_trace_models


def checked_sample_sizes(value):
    """[draft, target] of --sample_run_sizes: two sizes or model folders whose random weights fit in memory (one
    at a time: tools/random_models.py writes each and frees it); else a ValueError naming the flag."""
    sizes = as_names(value, "--sample_run_sizes")
    if len(sizes) != 2:
        raise ValueError(f"--sample_run_sizes takes two sizes, the draft's and the target's; got {shown(value)}")
    for size in sizes:
        check_memory_for([(size, benchmark.hparams_of(size))])
    return sizes


def sample_run(seed, tokenizer_dir, n_tokens, sizes=("124M", "355M")):
    """`python main.py` on random weights of the 124M and 355M shapes, saved as Hugging Face folders by
    tools/random_models.py with the same seed: its output.

    The folders go to a temporary directory, so the command shown names /tmp/random-124M and /tmp/random-355M.
    """
    with tempfile.TemporaryDirectory() as tmp:
        folders = write_random_models(sizes, tmp, seed, tokenizer_dir)
        command = [sys.executable, "main.py", "--draft_model_size", str(folders[0]), "--target_model_size",
                   str(folders[1]), "--n_tokens_to_generate", str(n_tokens)]
        help_text = subprocess.run([sys.executable, "main.py", "--help"], cwd=REPO, capture_output=True, text=True,
                                   env={**os.environ, "PAGER": "cat"}).stdout
        if "--color" in help_text:
            command += ["--color", "never"]
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    shown = " ".join(["python"] + command[1:]).replace(str(Path(tmp)), "/tmp")
    return f"```text\n$ {shown}\n{out.replace(str(Path(tmp)), '/tmp').rstrip()}\n```"


# ------------------------------------------------------------------------------------------------------------
# The rounds' page (main.py --html): a screenshot, and what a long run's page weighs
# ------------------------------------------------------------------------------------------------------------


PAGE_COMMAND = ["--prompt", "Alan Turing theorized that computers", "--n_tokens_to_generate", "30", "--K", "4",
                "--temperature", "1", "--color", "never"]  # the README's trace run
PAGE_SIZE_TOKENS = 1550  # enough tokens for over 1,000 rounds of a draft that is mostly wrong


def rounds_page(tokenizer_dir, img_dir, dry_run):
    """The page-size part; unless dry_run, img_dir/rounds_page.png too: headless Chromium's screenshot of the
    README's trace run's page at its round 2. The size is measured on a run of PAGE_SIZE_TOKENS tokens by two
    unrelated tiny random models (TINY_HPARAMS, a longer context), whose rounds mostly write one token."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory() as tmp:
        near, target = write_trace_models(Path(tmp) / "models", tokenizer_dir)  # named as the README's command does
        html = Path(tmp) / "rounds.html"
        subprocess.run([sys.executable, REPO / "main.py", *PAGE_COMMAND, "--draft_model_size", f"models/{near.name}",
                        "--target_model_size", f"models/{target.name}", "--html", html], cwd=tmp, capture_output=True,
                       check=True)
        if not dry_run and not chromium:  # the size below is still measured; the picture stays as it was
            print(f"{Path(img_dir) / 'rounds_page.png'} not remade: no chromium on the PATH (Debian: apt-get install "
                  f"chromium)", file=sys.stderr)
        if not dry_run and chromium:
            subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                            f"--user-data-dir={Path(tmp) / 'profile'}", f"--screenshot={Path(img_dir).resolve() / 'rounds_page.png'}",
                            "--window-size=1100,1250", html.as_uri() + "#round=2"], capture_output=True, check=True)
        hparams = {**TINY_HPARAMS, "n_ctx": PAGE_SIZE_TOKENS + 50}
        folders = [write_hf_folder(Path(tmp) / name, random_params(hparams, np.random.default_rng(seed), std=0.5),
                                   hparams, tokenizer_dir) for name, seed in (("draft", 2), ("target", 1))]
        out = subprocess.run([sys.executable, "main.py", "--n_tokens_to_generate", str(PAGE_SIZE_TOKENS), "--temperature",
                              "1", "--draft_model_size", folders[0], "--target_model_size", folders[1], "--html", html,
                              "--color", "never"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        rounds = int(re.search(r"; (\d+) rounds, \d+ target forward passes", out).group(1))
        size = html.stat().st_size
    template = (REPO / "command_line" / "page.html").stat().st_size
    return wrap(f"A page of {rounds:,} rounds ({PAGE_SIZE_TOKENS:,} tokens, K = 4, two unrelated tiny random models): "
                f"{size / 1000:,.0f}\u00a0kB, {template / 1000:.0f}\u00a0kB of it CSS and script, "
                f"{(size - template) / rounds:,.0f} bytes a round.")
