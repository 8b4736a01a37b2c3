"""`python tools/random_models.py`, the README's sample-run step, runs as a learner runs it, with no test code.

tests/test_imports.py reads the import statements; this runs the script itself and then asks Python which of the
modules it loaded come from tests/ (conftest included): none may. Before, it imported tests/test_main.py and
tests/conftest.py for the folder writer and the tokenizer's place.
"""

import os
import subprocess
import sys

from conftest import REPO_ROOT

# run the script as `python tools/random_models.py ARGS` would (runpy: the same __main__, the same sys.path[0]),
# then print the loaded modules that live in tests/
RUN_AND_LIST_TEST_MODULES = """
import os, runpy, sys
script, *args = sys.argv[1:]
sys.argv = [script, *args]
sys.path[0] = os.path.dirname(script)
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as stop:
    assert not stop.code, stop.code
tests = os.path.join({root!r}, "tests") + os.sep
print(sorted(name for name, module in sys.modules.items() if (getattr(module, "__file__", None) or "").startswith(tests)))
"""


def test_the_sample_run_step_writes_its_models_without_loading_a_test_module(tmp_path, release_124M_dir):
    code = RUN_AND_LIST_TEST_MODULES.format(root=str(REPO_ROOT))
    run = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT / "tools" / "random_models.py"), "--trace",
                          "--folder", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "GPT2_MODELS_DIR": str(release_124M_dir.parent)})
    assert run.returncode == 0, run.stderr[-2000:]
    *written, loaded = run.stdout.splitlines()
    assert written == [f"wrote {tmp_path / 'random-tiny-near'}", f"wrote {tmp_path / 'random-tiny-target'}"]
    assert loaded == "[]", f"the script loaded test code: {loaded}"


def test_without_the_tokenizer_files_it_says_what_works_offline_in_one_line(tmp_path):
    """GPT2_MODELS_DIR names an empty folder: one `error:` line, exit code 2, that says to put encoder.json and
    vocab.bpe in DIR/124M and set GPT2_MODELS_DIR (what works offline) before the download main.py could make;
    nothing is written."""
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "random_models.py"), "--folder", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "GPT2_MODELS_DIR": str(tmp_path / "empty")})
    assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
    [line] = run.stderr.splitlines()
    assert line.startswith(f"error: OpenAI's tokenizer files encoder.json and vocab.bpe are not in "
                           f"{tmp_path / 'empty' / '124M'}: copy encoder.json and vocab.bpe"), line
    assert "set GPT2_MODELS_DIR=DIR" in line and "run python main.py once" not in line
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_encoder_json_is_one_line_naming_it_and_no_model_folder_is_written(tmp_path, release_124M_dir):
    """An encoder.json cut in half in $GPT2_MODELS_DIR/124M was copied into every new model folder, exit 0 (the
    folder then failed to load). The files are read as encoder.py reads them first."""
    damaged = tmp_path / "models" / "124M"
    damaged.mkdir(parents=True)
    text = (release_124M_dir / "encoder.json").read_text(encoding="utf-8")
    (damaged / "encoder.json").write_text(text[: len(text) // 2], encoding="utf-8")
    (damaged / "vocab.bpe").write_bytes((release_124M_dir / "vocab.bpe").read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "random_models.py"), "--trace", "--folder",
                          str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "GPT2_MODELS_DIR": str(tmp_path / "models")})
    assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
    [line] = run.stderr.splitlines()
    assert line.startswith(f"error: GPT-2 vocabulary file {damaged / 'encoder.json'} is not valid JSON"), line
    assert "set GPT2_MODELS_DIR" in line and list(out.iterdir()) == []


def test_an_empty_gpt2_models_dir_counts_as_unset_never_as_the_current_folder(monkeypatch):
    """`GPT2_MODELS_DIR=` made Path(""), the current folder: a tool read (and random_models copied) whatever
    124M/ the user stood next to. Empty is unset, as for HF_HUB_CACHE: models/ in the repository."""
    from tools import release_files

    monkeypatch.setenv("GPT2_MODELS_DIR", "")
    assert release_files.models_dir() == REPO_ROOT / "models"
    monkeypatch.setenv("GPT2_MODELS_DIR", "/data/gpt2")
    assert str(release_files.models_dir()) == "/data/gpt2"
