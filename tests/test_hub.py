"""Models by their Hugging Face names: the Hugging Face cache and the Hub, checked against the real client.

tests/test_hub_cache.py's `FakeHub` answers on 127.0.0.1 like the Hugging Face Hub answers huggingface_hub:
HEAD and GET on /{repo}/resolve/main/{file} with the headers the client reads (ETag, X-Repo-Commit,
Content-Length), and for the large file a 302 redirect to another host name with X-Linked-Etag and
X-Linked-Size, where the bytes are served (with Range). Both directions are tested: a cache written by huggingface_hub's own hf_hub_download is
read by this project with no request at all, and what this project downloads is found by huggingface_hub
(try_to_load_from_cache, and hf_hub_download with local_files_only=True). The weights are tiny and random.
"""

import hashlib
import threading
from pathlib import Path

import pytest

import main
import utils
from loaders.download import DownloadError
from loaders.hub import HUB_FILES
from test_hub_cache import COMMIT, FakeHub, hub_repo_files
from test_main import TINY_HPARAMS

huggingface_hub = pytest.importorskip("huggingface_hub")


@pytest.fixture
def hub(tmp_path, release_124M_dir, monkeypatch):
    """tests/test_hub_cache.py's FakeHub, serving gpt2 under its canonical and its legacy id, distilgpt2, a
    repository whose config is not GPT-2's, and one without model.safetensors."""
    files = hub_repo_files(tmp_path / "repo1", release_124M_dir, seed=1)
    server = FakeHub({"openai-community/gpt2": files, "gpt2": files, "distilbert/distilgpt2": files,
                      "someone/not-gpt2": hub_repo_files(tmp_path / "repo2", release_124M_dir, 2, "llama"),
                      "someone/no-safetensors": {k: v for k, v in files.items() if k != "model.safetensors"}})
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # a fast shutdown
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    yield server
    server.shutdown()
    server.server_close()


def error_lines(stderr):
    """The lines of stderr that are not progress bars (tqdm redraws its bar with carriage returns), and no
    traceback: what a user reads as the error."""
    assert "Traceback" not in stderr
    return [line.rsplit("\r", 1)[-1] for line in stderr.splitlines() if line.rsplit("\r", 1)[-1].strip()
            and "%|" not in line.rsplit("\r", 1)[-1]]


@pytest.mark.parametrize("hub_id", ["openai-community/gpt2", "gpt2"])  # canonical, and the legacy folder name
def test_a_cache_written_by_huggingface_hub_is_read_with_no_request(hub, tmp_path, hub_id):
    for name in HUB_FILES:
        huggingface_hub.hf_hub_download(hub_id, name, cache_dir=tmp_path / "hf-cache", endpoint=hub.url)
    assert (tmp_path / "hf-cache" / f"models--{hub_id.replace('/', '--')}" / "refs" / "main").is_file()
    requests_before = len(hub.requests)
    folder = utils.resolve_model("gpt2", str(tmp_path / "models"))
    encoder, hparams, params = utils.load_model(folder)
    assert len(hub.requests) == requests_before  # not one request: every file was in the cache
    assert hparams == TINY_HPARAMS and encoder.encode("Hello world!") == [15496, 995, 0]


def test_what_we_download_is_found_by_huggingface_hub_and_is_the_same_bytes(hub, tmp_path):
    folder = utils.resolve_model("distilgpt2", str(tmp_path / "models"))
    cache = tmp_path / "hf-cache"
    assert folder == cache / "models--distilbert--distilgpt2" / "snapshots" / COMMIT
    assert (cache / "models--distilbert--distilgpt2" / "refs" / "main").read_text() == COMMIT
    blob = (folder / "model.safetensors").resolve()
    assert blob.parent.name == "blobs" and blob.name == hashlib.sha256(blob.read_bytes()).hexdigest()  # by ETag
    for name in HUB_FILES:
        found = huggingface_hub.try_to_load_from_cache("distilbert/distilgpt2", name, cache_dir=cache)
        assert isinstance(found, str) and Path(found).read_bytes() == hub.repos["distilbert/distilgpt2"][name]
    requests_before = len(hub.requests)
    path = huggingface_hub.hf_hub_download("distilbert/distilgpt2", "model.safetensors", cache_dir=cache,
                                           local_files_only=True)
    assert Path(path).resolve() == blob and len(hub.requests) == requests_before
    assert utils.resolve_model("distilgpt2", str(tmp_path / "models")) == folder  # the second time: the cache


def test_main_runs_the_seeds_pair_by_hub_names(hub, tmp_path, capsys):
    """`--draft_model_size distilgpt2 --target_model_size gpt2` (distinct repos, one tokenizer), greedy."""
    main.run_command_line(["--draft_model_size", "distilgpt2", "--target_model_size", "openai-community/gpt2",
                           "--n_tokens_to_generate", "6", "--models_dir", str(tmp_path / "models")])
    assert "identical: yes" in capsys.readouterr().out


@pytest.mark.parametrize("name, expected", [
    ("someone/no-safetensors", "someone/no-safetensors has no model.safetensors on the Hub"),
    ("someone/not-gpt2", "someone/not-gpt2 is not a GPT-2 repository: its config.json says model_type 'llama'"),
    ("nobody/nothing", "HTTP 404"),
])
def test_a_bad_repository_is_one_error_line_and_a_nonzero_exit(hub, tmp_path, capsys, name, expected):
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--target_model_size", name, "--drafter", "lookup", "--models_dir",
                               str(tmp_path / "models"), "--download_retries", "0"])
    err = error_lines(capsys.readouterr().err)
    assert exit_info.value.code == 1 and len(err) == 1 and expected in err[0], err


def test_nothing_cached_and_no_network_names_the_cache_folder_and_the_url(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing answers
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--target_model_size", "gpt2-medium", "--drafter", "lookup", "--download_retries",
                               "0", "--models_dir", str(tmp_path / "models")])
    err = error_lines(capsys.readouterr().err)
    assert exit_info.value.code == 1 and len(err) == 1
    assert "http://127.0.0.1:9/openai-community/gpt2-medium/resolve/main/config.json" in err[0]
    assert str(tmp_path / "empty-cache" / "models--openai-community--gpt2-medium") in err[0]


def test_a_folder_not_made_yet_whose_name_reads_as_owner_and_name_is_said_missing_before_the_hubs_failure(
        tmp_path, monkeypatch):
    """README's trace command names models/random-tiny-near, made by random_models.py: run first, the name is no
    folder and reads as a Hub id (owner "models"), and the Hub cannot be reached offline; the one line says first
    that there is no such folder. A path only a folder could be (three parts) is refused before any request."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing answers
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DownloadError) as failed:
        utils.resolve_model("models/random-tiny-near", retries=0)
    assert str(failed.value).startswith(f"there is no folder models/random-tiny-near (seen from {tmp_path}), so it "
                                        f"was taken for a Hugging Face Hub name: could not reach"), failed.value
    with pytest.raises(ValueError, match=r"^there is no folder 'models/random/tiny' \(seen from "):
        utils.resolve_model("models/random/tiny", retries=0)


def test_when_openai_s_bucket_fails_the_error_names_the_same_model_on_the_hub(tmp_path):
    with pytest.raises(DownloadError, match="'gpt2-medium'"):
        utils.resolve_model("355M", str(tmp_path / "models"), base_url="http://127.0.0.1:9", retries=0)


def test_help_lists_every_name_and_the_openai_size_it_matches(capsys):
    with pytest.raises(SystemExit):  # fire exits after printing the help
        main.run_command_line(["--help"])
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())  # fire writes its help to one or the other
    for name, size in [("gpt2", "124M"), ("gpt2-medium", "355M"), ("gpt2-large", "774M"), ("gpt2-xl", "1558M")]:
        assert f"{name} (= {size})" in out
    assert "distilgpt2" in out and "openai-community/gpt2" in out and "distilbert/distilgpt2" in out
