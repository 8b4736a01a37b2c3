"""Two runs downloading into one place at once take turns per file: each file is downloaded once and arrives
whole; a run waits for another's lock at most its deadline; a lock left by a killed run never blocks.

Read loaders/safe_files.py (file_lock) and loaders/download.py (download_lock) first: these tests are their specification.
Servers on 127.0.0.1 send each body slowly (64 KB every 10 ms), so the two runs overlap; the runs are threads
of this process (the lock is a file made with O_EXCL: threads exclude each other as processes do), and one
test kills a real process. No network.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import test_hub_cache
from test_hostile_exchanges import ScriptedServer
from test_hostile_hub import gpt2_files, repo_folder, sha256
from test_load import GPT2_VOCAB, random_flat_params, write_tf_checkpoint

from loaders import download
from loaders.download import DownloadError, download_gpt2_files, download_lock
from utils import resolve_model

hub, repos = test_hub_cache.hub, test_hub_cache.repos  # the fixtures: the fake Hub, and the repositories it serves
FAST = dict(retries=2, backoff_seconds=0.0, timeout_seconds=10.0)
DATA_FILE = "model.ckpt.data-00000-of-00001"


def slowly(handler, data):
    """The whole file with its size, 64 KB every 10 ms: 1 MB takes about 0.16 s, long enough to overlap."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    try:
        for start in range(0, len(data), 64 * 1024):
            handler.wfile.write(data[start:start + 64 * 1024])
            handler.wfile.flush()
            time.sleep(0.01)
    except OSError:
        pass


def at_once(function, runs=2):
    """Run `function` in `runs` threads started together; return what each returned or raised."""
    results, start = [None] * runs, threading.Barrier(runs)

    def run(i):
        start.wait()
        try:
            results[i] = function()
        except Exception as error:  # noqa: BLE001 - reported by the test
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return results


@pytest.fixture
def release(release_124M_dir, tmp_path, monkeypatch):
    """A tiny checkpoint with GPT-2's tokenizer served as 124M, slowly ({url path: bytes}); it plays 124M."""
    served = tmp_path / "served"
    write_tf_checkpoint(served, random_flat_params(GPT2_VOCAB, np.random.default_rng(0)), GPT2_VOCAB)
    files = {name: (served / name).read_bytes() for name in ("checkpoint", "hparams.json", "model.ckpt.index", DATA_FILE)}
    files.update({name: (release_124M_dir / name).read_bytes() for name in ("encoder.json", "vocab.bpe")})
    files["model.ckpt.meta"] = b"(the graph; never read)"
    monkeypatch.setitem(download.HPARAMS, "124M", GPT2_VOCAB)
    return files


def test_two_runs_into_one_models_dir_download_each_file_once_and_both_get_whole_files(release, tmp_path):
    """Before, both downloaded every file into the same .part: the second appended to the file the first had
    already renamed, and encoder.json ended at 1,563,452 bytes under its final name."""
    model_dir = tmp_path / "models" / "124M"
    with ScriptedServer({f"/124M/{name}": data for name, data in release.items()}) as server:
        server.answers.update({path: slowly for path in server.files})
        results = at_once(lambda: download_gpt2_files("124M", model_dir, base_url=server.url, **FAST))
    assert results == [None, None]
    assert sorted(server.gets) == sorted(server.files)  # each file asked for once
    assert {path.name: path.read_bytes() for path in model_dir.iterdir()} == release  # no .part, no .lock left


def test_two_runs_into_one_empty_hugging_face_cache_both_succeed_and_download_each_blob_once(hub, repos, tmp_path):
    """Before, one of them failed with an error blaming the cache (the other had renamed the .part it wrote)."""
    hub.body_for["model.safetensors"] = slowly
    hub.body_for["vocab.json"] = slowly
    results = at_once(lambda: resolve_model("gpt2", tmp_path / "models"))
    assert results[0] == results[1] == repo_folder(tmp_path) / "snapshots" / test_hub_cache.COMMIT, results
    data = gpt2_files(repos)["model.safetensors"]
    assert hub.requests.count(("GET", f"/lfs/{sha256(data)}")) == 1
    assert (results[0] / "model.safetensors").read_bytes() == data
    assert not [path for path in (repo_folder(tmp_path) / "blobs").iterdir() if path.suffix in (".part", ".lock")]


def write_lock(path, pid, host=None, until=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = {"pid": pid, "host": host or socket.gethostname(), "until": until or time.time() + 3600}
    path.with_name(path.name + ".lock").write_text(json.dumps(owner))


def test_a_lock_held_by_a_live_run_is_waited_for_at_most_the_deadline_with_a_message(release, tmp_path, capsys):
    model_dir = tmp_path / "models" / "124M"
    write_lock(model_dir / "hparams.json", os.getpid())  # a live process: this one
    with ScriptedServer({f"/124M/{name}": data for name, data in release.items()}) as server:
        started = time.monotonic()
        with pytest.raises(DownloadError, match=f"process {os.getpid()} .* is still working on .*hparams.json after "
                                                f"1 s of waiting .* delete {model_dir / 'hparams.json.lock'}"):
            download_gpt2_files("124M", model_dir, base_url=server.url, deadline_seconds=1, **FAST)
        assert time.monotonic() - started < 3 and server.gets == []
    assert "waiting for process" in capsys.readouterr().err


def dead_pid():
    """The id of a process that has ended."""
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(process.stdout)


@pytest.mark.parametrize("lock", ["killed_run", "other_host_past_its_time", "unreadable_for_a_minute",
                                  "named_pipe_for_a_minute"])
def test_a_stale_lock_never_blocks(release, tmp_path, lock):
    """A run killed mid-download leaves its lock; so may a run on another machine sharing the folder, or one
    killed while writing the lock. None of them makes the next run wait: the download proceeds at once."""
    model_dir = tmp_path / "models" / "124M"
    if lock == "killed_run":
        write_lock(model_dir / "hparams.json", dead_pid())
    elif lock == "other_host_past_its_time":
        write_lock(model_dir / "hparams.json", 1, host="another-machine", until=time.time() - 1)
    else:  # a pipe would make a plain open() wait for a writer for ever
        model_dir.mkdir(parents=True)
        os.mkfifo(model_dir / "hparams.json.lock") if "pipe" in lock else (model_dir / "hparams.json.lock").write_text("")
        os.utime(model_dir / "hparams.json.lock", (time.time() - 60, time.time() - 60))
    with ScriptedServer({f"/124M/{name}": data for name, data in release.items()}) as server:
        started = time.monotonic()
        download_gpt2_files("124M", model_dir, base_url=server.url, deadline_seconds=30, **FAST)
        assert time.monotonic() - started < 5
    assert {path.name for path in model_dir.iterdir()} == set(release)


def test_a_lock_on_another_host_within_its_time_is_not_taken(tmp_path):
    """Its process cannot be looked up from here: only the time its owner wrote says when it is stale."""
    write_lock(tmp_path / "file", 1, host="another-machine", until=time.time() + 3600)
    with pytest.raises(DownloadError, match="process 1 on another-machine is still working on"):
        with download_lock(tmp_path / "file", deadline_seconds=0.3):
            pass


def test_a_complete_release_folder_is_only_read_no_lock_is_taken(release_124M_dir, tmp_path, monkeypatch):
    """A complete folder may be read-only (a shared copy of the release): nothing is written into it, not even a
    lock, and no request is made."""
    folder = tmp_path / "124M"
    shutil.copytree(release_124M_dir, folder)
    for name in ("model.ckpt.meta", DATA_FILE):
        (folder / name).touch()

    def refuse(*args, **kwargs):
        raise AssertionError("a lock was taken in a complete folder")

    monkeypatch.setattr(download, "file_lock", refuse)
    download_gpt2_files("124M", folder, base_url="http://127.0.0.1:9", **FAST)
