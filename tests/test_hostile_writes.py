"""Nothing is written through a link or into a pipe: every file the project writes goes to a fresh file it made
itself in the destination folder, then an atomic rename; a download's .part is resumed only if it is a regular file.

Read loaders/safe_files.py first (written_atomically), then loaders/download.py (resumable_size, open_part_file): these tests are
their specification. Each test puts a link (to a file outside, which must stay as it is) or a named pipe where
the project writes: the costs file, the JSON tables and figures of the tools, a release file's .part, a blob's
.part in the Hugging Face cache. Servers on 127.0.0.1 (tests/test_hostile_exchanges.py's, the FakeHub); no network.
"""

import os
import threading

import pytest
import test_hub_cache
from test_hostile_exchanges import ScriptedServer
from test_hostile_hub import assert_untouched, gpt2_files, outside, repo_folder, sha256  # noqa: F401 - a fixture

from speed import calibration
from loaders.download import download_file
from loaders.safe_files import save_figure, write_atomically
from tools import benchmark_forward, benchmark_text
from utils import resolve_model

hub, repos = test_hub_cache.hub, test_hub_cache.repos  # the fixtures: the fake Hub, and the repositories it serves
COSTS = calibration.MeasuredCosts(r_table=[1.0, 1.2, 1.5], c=0.1, measured={1: 1.0, 3: 1.5})


def save_a_figure(path):
    from matplotlib.figure import Figure

    figure = Figure()
    figure.add_subplot().plot([0, 1], [1, 0])
    save_figure(figure, path)


WRITERS = {  # every kind of file the project writes, by the function that writes it
    "costs_file": lambda path: calibration.save_costs(path, COSTS),
    "benchmark_text_json": lambda path: benchmark_text.write_json(path, {"results": {}}),
    "benchmark_forward_json": lambda path: benchmark_forward.write_json(path, {"sizes": []}),
    "figure": save_a_figure,
    "page_or_table": lambda path: write_atomically(path, "text\n"),
}
NAMES = {"costs_file": "r_table.json", "benchmark_text_json": "text.json", "benchmark_forward_json": "forward.json",
         "figure": "rounds.png", "page_or_table": "README.md"}


@pytest.mark.parametrize("writer", WRITERS, ids=WRITERS)
def test_a_link_at_a_file_the_project_writes_is_replaced_never_written_through(tmp_path, outside, writer):
    """Before, the tools' JSON tables, the figures and the pages were written with write_text or savefig, which
    follow a link: a file outside the folder was overwritten."""
    if writer == "figure":
        pytest.importorskip("matplotlib")
    path = tmp_path / "folder" / NAMES[writer]
    path.parent.mkdir()
    path.symlink_to(outside / "precious.txt")

    WRITERS[writer](path)

    assert_untouched(outside)
    assert path.is_file() and not path.is_symlink() and path.stat().st_size > 0
    assert os.listdir(path.parent) == [path.name]  # no temporary left
    if writer != "figure":
        assert path.read_text().strip()


def test_a_link_named_like_the_costs_files_old_temporary_is_never_written_through(tmp_path, outside):
    """A model folder cloned or unpacked with r_table.json.part -> a file elsewhere: before, `main.py --K auto`
    wrote the costs through it (exit 0). Now they go to a fresh file of their own, renamed over r_table.json."""
    link = tmp_path / (calibration.COSTS_FILE + ".part")
    link.symlink_to(outside / "precious.txt")

    path = calibration.save_costs(tmp_path / calibration.COSTS_FILE, COSTS)

    assert_untouched(outside)
    assert calibration.load_costs(path).r_table == COSTS.r_table and link.is_symlink()


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(tmp_path):
    path = tmp_path / "r_table.json"
    calibration.save_costs(path, COSTS)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_atomically(path, object())  # fails half-way
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["r_table.json"]


def finishes_within(seconds, function, pipe):
    """Run `function` in a thread; if it still runs after `seconds` (waiting on the named `pipe` for a reader:
    the defect), open the pipe for reading so that it ends, and fail."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(function()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        descriptor = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # a reader: the hung open returns
        thread.join(10)
        os.close(descriptor)
        pytest.fail(f"still waiting on the named pipe {pipe} after {seconds} s")
    return outcome


@pytest.mark.parametrize("kind", ["named_pipe", "link_to_a_file_outside"])
def test_a_release_files_part_that_is_not_a_regular_file_is_replaced_never_followed(tmp_path, outside, kind):
    """Before, a named pipe as checkpoint.part made the download wait for a reader for ever."""
    data = b'model_checkpoint_path: "model.ckpt"\n'
    part = tmp_path / "124M" / "checkpoint.part"
    part.parent.mkdir()
    os.mkfifo(part) if kind == "named_pipe" else part.symlink_to(outside / "precious.txt")
    with ScriptedServer({"/124M/checkpoint": data}) as server:
        finishes_within(10, lambda: download_file(f"{server.url}/124M/checkpoint", part.with_name("checkpoint"),
                                                  backoff_seconds=0), part)
    assert (tmp_path / "124M" / "checkpoint").read_bytes() == data and not os.path.lexists(part)
    assert_untouched(outside)


@pytest.mark.parametrize("kind", ["named_pipe", "link_to_a_file_outside"])
def test_a_blobs_part_that_is_not_a_regular_file_is_replaced_never_followed(hub, repos, tmp_path, outside, kind):
    data = gpt2_files(repos)["model.safetensors"]
    part = repo_folder(tmp_path) / "blobs" / f"{sha256(data)}.part"
    part.parent.mkdir(parents=True)
    os.mkfifo(part) if kind == "named_pipe" else part.symlink_to(outside / "precious.txt")
    folder, = finishes_within(10, lambda: resolve_model("gpt2", tmp_path / "models"), part)
    assert (folder / "model.safetensors").read_bytes() == data and not os.path.lexists(part)
    assert_untouched(outside)


# ------------------------------------------------------------------------------------------------------------
# A tool's scratch folder: what the user had there stays
# ------------------------------------------------------------------------------------------------------------


def tiny_size(tmp_path):
    """A model folder holding only hparams.json: a size for tools/measure_loading.py (its weights are random)."""
    import json

    from test_main import TINY_HPARAMS

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "hparams.json").write_text(json.dumps(TINY_HPARAMS))
    return folder


def snapshot(folder):
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() else None
            for path in sorted(folder.rglob("*"))}


def users_folder(tmp_path):
    folder = tmp_path / "work"
    (folder / "notes").mkdir(parents=True)
    (folder / "thesis.txt").write_text("years of work")
    (folder / "notes" / "todo.txt").write_text("back it up")
    return folder


def test_measure_loading_writes_into_a_folder_of_its_own_and_leaves_what_the_folder_held(tmp_path):
    """`--folder F` removed F whole when it was done, the user's files in it included (`--folder .` emptied the
    working folder). Now the checkpoints go into a new folder inside F, the only thing removed; and a --folder
    the run made itself is gone again afterwards."""
    import subprocess
    import sys

    from conftest import REPO_ROOT

    folder, made = users_folder(tmp_path), tmp_path / "new" / "load"
    before = snapshot(folder)
    for where in (folder, made):
        run = subprocess.run([sys.executable, str(REPO_ROOT / "tools/measure_loading.py"), "--sizes",
                              str(tiny_size(tmp_path) if where == folder else tmp_path / "tiny"), "--repeats", "1",
                              "--folder", str(where)], cwd=folder, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0 and "TF checkpoint: peak RSS" in run.stdout, run.stderr[-2000:]
    assert snapshot(folder) == before
    assert not (tmp_path / "new").exists()


def test_measure_loading_on_a_full_disk_removes_its_partial_checkpoint_and_names_it(tmp_path, monkeypatch, capsys):
    """The disk filled up in the middle of a checkpoint: its partial files stayed and the line named no file.
    Now the line names the file being written, says it was removed, and the folder holds what it held."""
    import errno

    import pytest

    from command_line.scripts import run_script
    from tools import measure_loading

    def fill_the_disk(path, tensors, dtype):
        path.write_bytes(b"half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(measure_loading, "write_safetensors", fill_the_disk)
    folder = users_folder(tmp_path)
    before = snapshot(folder)
    with pytest.raises(SystemExit) as exit_info:
        run_script(measure_loading.main, ["--sizes", str(tiny_size(tmp_path)), "--folder", str(folder)],
                   "tools/measure_loading.py")
    line = capsys.readouterr().err.strip()
    assert exit_info.value.code == 1 and "\n" not in line
    assert line.startswith(f"error: {folder}/measure-loading-") and "/hf/model.safetensors (the Hugging Face " in line
    assert "removed): the disk is full" in line and snapshot(folder) == before


def test_measure_loading_refuses_a_size_whose_checkpoints_do_not_fit_on_the_disk_before_writing(
        tmp_path, monkeypatch, capsys):
    import shutil

    import pytest

    from command_line.scripts import run_script
    from tools import measure_loading

    monkeypatch.setattr(measure_loading.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    folder = users_folder(tmp_path)
    before = snapshot(folder)
    with pytest.raises(SystemExit) as exit_info:
        run_script(measure_loading.main, ["--sizes", "124M", "--folder", str(folder)], "tools/measure_loading.py")
    line = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and line.startswith(f"error: --folder {folder}: 124M's two checkpoints need")
    assert "0.0 GB free; free some space" in line and snapshot(folder) == before
