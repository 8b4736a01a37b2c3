"""How a run ends when its output, its disk or its user goes away: one line, never a traceback.

Read command_line/scripts.py first (check_stdout, ending_as_one_line, run_script). Each case runs a command in a
subprocess, as a user would: main.py, tools/benchmark.py and a tools/ script.

- The standard output closed (`>&-`): checked before anything loads; one line, exit code 2.
- A full disk: a file size limit (RLIMIT_FSIZE, POSIX) makes every write past it fail with EFBIG, as a full
  disk fails with ENOSPC; one line naming the file and saying what to do, exit code 1.
- Ctrl-C (SIGINT, which Python turns into KeyboardInterrupt on every system): `Interrupted.`, exit code 130.
"""

import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT
from test_main import TINY_HPARAMS, one_error_line, tiny_params, write_hf_folder

try:
    import resource
except ImportError:  # Windows
    resource = None

needs_rlimit = pytest.mark.skipif(resource is None, reason="file size limits (RLIMIT_FSIZE) are POSIX")


def command(script, *flags):
    return [sys.executable, str(REPO_ROOT / script), *map(str, flags)]


@pytest.fixture
def tiny_dir(tmp_path, release_124M_dir):
    return write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)


@pytest.mark.parametrize("args", [
    ("main.py", "--drafter", "lookup", "--n_tokens_to_generate", 5, "--target_model_size", "{tiny}"),
    ("tools/benchmark.py", "--random_weights", "--draft_model_size", "{tiny}", "--target_model_size", "{tiny}",
     "--Ks", 1, "--n_tokens_to_generate", 4, "--repeats", 1),
    ("tools/benchmark_text.py", "--size", "{tiny}", "--repeats", 1),
    ("tools/pass_parts.py", "--size", "{tiny}", "--rounds", 1, "--ms", "1,2"),
    ("tools/worked_round.py",),
], ids=lambda args: args[0])
def test_a_closed_standard_output_is_one_line_before_anything_loads(tmp_path, tiny_dir, args):
    """`python main.py >&-` loaded the model and then failed with a traceback at its first print."""
    script, *flags = [str(a).replace("{tiny}", str(tiny_dir)) for a in args]
    result = subprocess.run(command(script, *flags), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, timeout=120, pass_fds=(), close_fds=True,
                            preexec_fn=_close_stdout if sys.platform != "win32" else None)
    line = one_error_line(result)
    assert "the standard output is closed" in line and result.returncode == 2


def _close_stdout():
    import os

    os.close(1)


def limited_to(n_bytes):
    """A preexec_fn: files of this process may grow to n_bytes at most (writes past it fail with EFBIG)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, n_bytes))
    return limit


@needs_rlimit
def test_a_full_disk_under_main_pys_output_is_one_line_saying_so(tmp_path, tiny_dir):
    """main.py > out.txt on a disk with 1 KB to spare: the text does not fit, and the run ends with one line
    (it said "... File too large" in a traceback, or "(None)" for the file)."""
    with open(tmp_path / "out.txt", "w") as out:
        result = subprocess.run(command("main.py", "--drafter", "lookup", "--n_tokens_to_generate", 30,
                                        "--target_model_size", tiny_dir),
                                cwd=tmp_path, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120,
                                preexec_fn=limited_to(1024))
    line = one_error_line(result)
    assert result.returncode == 1 and "the disk is full" in line and "free some space" in line, line


@needs_rlimit
def test_a_full_disk_under_main_pys_page_is_one_line_naming_the_page(tmp_path, tiny_dir):
    """main.py --html rounds.html with 8 KB to spare: the page (tens of KB) does not fit. Its write (a temporary
    file, renamed into place) names no file of its own; the line names the page (it said "a file")."""
    result = subprocess.run(command("main.py", "--drafter", "lookup", "--n_tokens_to_generate", 3,
                                    "--target_model_size", tiny_dir, "--html", tmp_path / "rounds.html"),
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, preexec_fn=limited_to(8192))
    line = one_error_line(result)
    assert result.returncode == 1 and f"{tmp_path / 'rounds.html'}: the disk is full" in line, line
    assert not (tmp_path / "rounds.html").exists()


@needs_rlimit
def test_a_full_disk_under_a_scripts_file_is_one_line_naming_the_file(tmp_path, release_124M_dir):
    """tools/random_models.py writes a model of 500 MB; with 100 KB to spare the weights file does not fit. The
    line names the model's folder, and the half-written folder is removed (it would look like a model)."""
    (tmp_path / "models" / "124M").mkdir(parents=True)
    for name in ("encoder.json", "vocab.bpe"):
        (tmp_path / "models" / "124M" / name).write_bytes((release_124M_dir / name).read_bytes())
    result = subprocess.run(command("tools/random_models.py", "--sizes", "124M", "--folder", tmp_path / "out"),
                            cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={"GPT2_MODELS_DIR": str(tmp_path / "models"), "PATH": "/usr/bin:/bin"},
                            preexec_fn=limited_to(100_000))
    line = one_error_line(result)
    assert result.returncode == 1 and f"{tmp_path / 'out' / 'random-124M'}: the disk is full" in line, line
    assert not (tmp_path / "out" / "random-124M").exists()


def sigint_as_at_a_terminal():
    """Popen's preexec_fn for a child the test will send SIGINT: SIGINT's default action back, as a terminal's
    Ctrl-C finds it. A test run started in the background by a shell (`pytest &`, a CI script run with &) ignores
    SIGINT, its children inherit that, and a Python that starts with SIGINT ignored never raises
    KeyboardInterrupt, so the child would go on to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(args, cwd, started_when):
    """Run args, send SIGINT once a stdout line starts with `started_when`, and return (exit code, stderr)."""
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=sigint_as_at_a_terminal)
    try:
        for line in process.stdout:
            if line.startswith(started_when):
                break
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    return process.returncode, err


@pytest.mark.skipif(sys.platform == "win32", reason="a test cannot press Ctrl-C in a Windows console")
def test_ctrl_c_in_the_middle_of_main_py_is_one_line_interrupted_and_exit_code_130(tmp_path, release_124M_dir):
    """A model with 1,024 positions, decoding without the cache: minutes of work, interrupted once it has begun."""
    hparams = {**TINY_HPARAMS, "n_ctx": 1024}
    from loaders.random_weights import random_params
    import numpy as np

    folder = write_hf_folder(tmp_path / "long", random_params(hparams, np.random.default_rng(0), std=0.5), hparams,
                             release_124M_dir)
    code, err = interrupted(command("main.py", "--drafter", "lookup", "--n_tokens_to_generate", 1000, "--kv_cache",
                                    "false", "--prompt", "Hi", "--target_model_size", folder), tmp_path,
                            "autoregressive sampling")
    assert (code, err) == (130, "Interrupted.\n")


@pytest.mark.skipif(sys.platform == "win32", reason="a test cannot press Ctrl-C in a Windows console")
def test_ctrl_c_in_the_middle_of_benchmark_py_is_one_line_interrupted_and_exit_code_130(tmp_path):
    code, err = interrupted(command("tools/benchmark.py", "--random_weights", "--target_model_size", "1558M",
                                    "--img_dir", tmp_path), tmp_path, "making random weights")
    assert code == 130 and err.strip().splitlines()[-1] == "Interrupted." and "Traceback" not in err, err


@pytest.mark.skipif(sys.platform == "win32", reason="a test cannot press Ctrl-C in a Windows console")
def test_ctrl_c_mid_line_on_a_shared_terminal_puts_interrupted_on_a_line_of_its_own(tmp_path, release_124M_dir):
    """The output and the errors in one file (a terminal, or `2>&1` as here) and the text cut mid-line: the last
    line read "Hi, the text so farInterrupted.". Now `Interrupted.` is a line of its own."""
    from loaders.random_weights import random_params
    import numpy as np

    hparams = {**TINY_HPARAMS, "n_ctx": 1024}
    folder = write_hf_folder(tmp_path / "long", random_params(hparams, np.random.default_rng(0), std=0.5), hparams,
                             release_124M_dir)
    process = subprocess.Popen(command("main.py", "--drafter", "lookup", "--n_tokens_to_generate", 1000, "--kv_cache",
                                       "false", "--prompt", "Hi", "--target_model_size", folder), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=sigint_as_at_a_terminal)
    try:
        for line in process.stdout:
            if line.startswith("autoregressive sampling"):
                break
        time.sleep(1.0)  # the text streams: "Hi" and some tokens, no end of line yet
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    lines = rest.splitlines()
    assert process.returncode == 130 and lines[-1] == "Interrupted." and "Traceback" not in rest, rest[-2000:]


def test_memory_run_out_past_a_limit_no_check_could_see_is_one_line_and_exit_code_1(capsys):
    """Under `ulimit -v` a model that the checks let through can still fail to get its cache (MemoryError,
    which once ended even `--plain` in a traceback): one `error:` line saying what to do, exit code 1."""
    from command_line.scripts import ending_as_one_line

    with pytest.raises(SystemExit) as ended:
        with ending_as_one_line():
            raise MemoryError("Unable to allocate 1.2 GiB for an array")
    assert ended.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: out of memory (Unable to allocate 1.2 GiB for an array)")
    assert "raise the limit (ulimit -v)" in err
