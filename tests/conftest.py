"""Shared test set-up: where OpenAI's real GPT-2 release files are, and what to do when they are not.

Some tests read OpenAI's real 124M release files (`encoder.json`, `vocab.bpe`, `hparams.json`,
`model.ckpt.index`; never the 498 MB weights). They are looked for in

1. the folder named by the environment variable `GPT2_MODELS_DIR` (CI points it at `../shared/gpt2`), else
2. `models/` in the repository, where `python main.py` downloads them

(tools/release_files.py's `models_dir`, where the tools look too). A learner who has neither gets a skip that
says how to get them. In CI (`CI=true`) a missing file is a failure, so a broken path can never turn the
real-file tests into silent skips.
"""

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"

# Make `import gpt2`, `import encoder`, ... work however pytest is started.
sys.path.insert(0, str(REPO_ROOT))

from tools.release_files import models_dir  # noqa: E402  ($GPT2_MODELS_DIR, else models/: the tools look there too)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(autouse=True)
def matrices_stored_the_default_way():
    """Every test reads models in speed/layouts.py's DEFAULT layouts unless it takes others (its own process's
    choice, measured at the first model read, would make a test's numbers depend on the machine it runs on);
    tests/test_layouts.py takes the others and measures."""
    from speed import layouts

    layouts.take(layouts.DEFAULT)
    yield
    layouts.take(layouts.DEFAULT)


@pytest.fixture(autouse=True)
def workers_back_to_the_default():
    """A test that measures routes or reads a routes file chooses how many processes share the products and how
    many of them share attention's heads, for the whole process (speed/second_core.use_workers,
    speed/products.use_head_workers): the next test starts from the default counts again."""
    yield
    second_core, products = sys.modules.get("speed.second_core"), sys.modules.get("speed.products")
    if second_core is not None and second_core.chosen_workers() is not None:
        second_core.use_workers(None)
    if products is not None:
        products.use_head_workers(None)


@pytest.fixture
def bubblewrap():
    """Skip (fail in CI) where the gradebook's sandbox cannot be made: bubblewrap missing, or refused."""
    from course import sandbox

    why_not = sandbox.unavailable()
    if why_not:
        if in_ci():
            pytest.fail("CI=true and the gradebook's sandbox is unavailable: " + why_not)
        pytest.skip("the gradebook's sandbox is unavailable: " + why_not)


@pytest.fixture
def release_124M_dir():
    """Return `Path` of the folder with OpenAI's real 124M release files, or skip (fail in CI) without them.

    Only the small files are required; tests that use this fixture never need the weights file.
    """
    folder = models_dir() / "124M"
    needed = ["encoder.json", "vocab.bpe", "hparams.json", "model.ckpt.index"]
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        reason = (
            f"needs OpenAI's real GPT-2 124M release files {missing} in {folder}: "
            f"`python classroom.py tokenizer` fetches them (1.5 MB), or set GPT2_MODELS_DIR to a folder holding 124M/"
        )
        if in_ci():
            pytest.fail("CI=true and " + reason)
        pytest.skip(reason)
    return folder


# A token tree's parents (parents[i] < i, -1 for a root), as in gpt2(..., parents=) and sampling.Proposal.
def path_to(parents, i):
    """The node indices root .. i: path_to([-1, -1, 0, 2], 3) == [0, 2, 3]."""
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that runs past its time limit (pytest.ini's `timeout`, or `--timeout=` in EXERCISES.md's grading
    commands) ends the whole run: the code under test probably never ends, and every later test would wait out
    the same limit. The run stops with a line saying so; other failures still let the run go on."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "from pytest-timeout" in str(report.longrepr):
        item.session.shouldstop = (
            f"{item.name} ran past its time limit, so the run stops here: the code it runs probably never ends "
            f"(a loop that makes no progress, such as a round that writes no token)"
        )


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder in which this process cannot create a file: a fresh folder of mode 0o500, or, for root (whom no
    mode stops, as in CI's containers), /sys, where the kernel refuses new files to everyone. Skips only where
    neither exists (not Linux, and root), and on Windows, where no folder mode refuses new files to their owner."""
    if not hasattr(os, "geteuid"):  # Windows
        pytest.skip("Windows has no folder mode that keeps a folder's owner from creating files in it")
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir(mode=0o500)
        return folder
    try:
        open("/sys/gpt2-write-probe", "a").close()
    except PermissionError:
        return Path("/sys")
    except OSError as error:
        pytest.skip(f"running as root, and /sys cannot serve as a read-only folder here ({error})")
    os.remove("/sys/gpt2-write-probe")
    pytest.skip("running as root, and /sys takes new files here: no folder refuses root")
