"""The Hugging Face cache in detail: resume, sizes, offline mode, agreement on blob names with the real client.

Read loaders/hub.py first: these tests are its specification.

tests/test_hub.py has the both-ways tests and main.py's errors, tests/test_hostile_hub.py a hostile Hub and a
damaged cache; this file holds the server they use.

A local server on 127.0.0.1 answers like the Hub does for `/{repo}/resolve/main/{file}` (what hf_hub_download
asks, in huggingface_hub's file_download.get_hf_file_metadata): a HEAD gives X-Repo-Commit and an ETag; a large
file (model.safetensors, stored in LFS on the Hub) answers with a 302 to its storage URL, and its ETag and size
come as X-Linked-Etag and X-Linked-Size; a small file's ETag is its git blob id. It answers at "main" or at the
commit itself, as the Hub does. GETs honour Range. HF_ENDPOINT points at the server and HF_HUB_CACHE at
tmp_path, so nothing here touches the network or the learner's real cache.

The repositories hold tiny random GPT-2s (tests/test_main.py's, 1.6 MB) with the real tokenizer files under
their Hugging Face names: vocab.json is OpenAI's encoder.json, merges.txt is vocab.bpe.
"""

import hashlib
import http.server
import json
import threading

import pytest

huggingface_hub = pytest.importorskip("huggingface_hub")  # a test requirement only (requirements/dev.txt)

from test_main import TINY_HPARAMS, tiny_params, write_hf_folder  # noqa: E402

from loaders.download import DownloadError  # noqa: E402
from loaders.hub import HUB_FILES, check_model_name, hf_hub_cache  # noqa: E402
from utils import resolve_model  # noqa: E402

COMMIT = "607a30d783dfa663caf39e06633721c8d4cfcd7e"  # the shape of a real commit id (40 hex digits)
DEAD_ENDPOINT = "http://127.0.0.1:9"  # nobody listens on the discard port: any request fails at once


def hub_repo_files(folder, tokenizer_dir, seed, model_type="gpt2"):
    """{file name: bytes} of a GPT-2 repository as the Hub holds it."""
    write_hf_folder(folder, tiny_params(seed), TINY_HPARAMS, tokenizer_dir)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = model_type
    return {"config.json": json.dumps(config).encode(),
            "model.safetensors": (folder / "model.safetensors").read_bytes(),
            "vocab.json": (folder / "encoder.json").read_bytes(), "merges.txt": (folder / "vocab.bpe").read_bytes()}


def git_blob_id(data):
    """The id git gives a file's contents, which the Hub sends as a small file's ETag: sha1 of a header and them."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub(http.server.ThreadingHTTPServer):
    """The Hub's answers for `repos` ({repo id: {file: bytes}}); `requests` records every (method, path), and
    `request_headers` the headers of each.

    A test makes it hostile, file by file: `headers_for[name]` changes the headers of the answers for that file
    (a value of None removes one), and `body_for[name]` answers a GET of it (for a large file, the GET that
    follows the redirect) with a function of (handler, data) that writes the whole answer itself."""

    daemon_threads = True  # a handler still dripping bytes to a client that left never holds up the tests
    block_on_close = False

    def __init__(self, repos):
        super().__init__(("127.0.0.1", 0), HubHandler)
        self.repos, self.requests, self.request_headers, self.lfs = repos, [], [], {}
        self.announced_extra = 0  # bytes added to the size a large file is announced with (a lying server)
        self.headers_for, self.body_for = {}, {}
        for files in repos.values():
            for name, data in files.items():
                if name.endswith(".safetensors"):
                    self.lfs[hashlib.sha256(data).hexdigest()] = (name, data)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def storage_url(self):
        """Another host name for the same server: the Hub sends large files to a CDN on another host, and
        huggingface_hub takes a large file's metadata from the redirect only when it leaves the Hub's host."""
        return f"http://localhost:{self.server_address[1]}"


class HubHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_HEAD(self):
        self.answer(body=False)

    def do_GET(self):
        self.answer(body=True)

    def answer(self, body):
        self.server.requests.append((self.command, self.path))
        self.server.request_headers.append(dict(self.headers))
        if self.path.startswith("/lfs/"):  # the storage a large file is redirected to: bytes only, no Hub headers
            name, data = self.server.lfs.get(self.path.removeprefix("/lfs/"), (None, None))
            if name in self.server.body_for and body:
                return self.server.body_for[name](self, data)
            return self.send_bytes(data, {}, body) if data is not None else self.send_error(404)
        repo, _, revision_and_name = self.path.lstrip("/").partition("/resolve/")
        revision, _, name = revision_and_name.partition("/")  # the Hub resolves "main" or the commit itself
        data = self.server.repos.get(repo, {}).get(name) if revision in ("main", COMMIT) else None
        if data is None:
            self.send_response(404)
            code = "EntryNotFound" if repo in self.server.repos else "RepoNotFound"
            self.send_header("X-Error-Code", code if revision in ("main", COMMIT) else "RevisionNotFound")
            self.send_header("Content-Length", "0")
            return self.end_headers()
        headers = {"X-Repo-Commit": COMMIT}
        if name.endswith(".safetensors"):
            sha256 = hashlib.sha256(data).hexdigest()
            self.send_response(302)
            announced = len(data) + self.server.announced_extra
            headers.update({"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(announced),
                            "ETag": '"git-pointer-etag"', "Location": f"{self.server.storage_url}/lfs/{sha256}",
                            "Content-Length": "0"})
            for key, value in {**headers, **self.server.headers_for.get(name, {})}.items():
                if value is not None:
                    self.send_header(key, value)
            return self.end_headers()
        if name in self.server.body_for and body:
            return self.server.body_for[name](self, data)
        headers["ETag"] = f'"{git_blob_id(data)}"'  # a small file's ETag on the Hub: its git blob id
        self.send_bytes(data, {**headers, **self.server.headers_for.get(name, {})}, body)

    def send_bytes(self, data, headers, body):
        start = 0
        if self.headers.get("Range", "").startswith("bytes="):
            start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0])
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        headers = {"Content-Length": str(len(data) - start), **headers}
        for key, value in headers.items():
            if value is not None:
                self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data[start:])


@pytest.fixture
def repos(tmp_path, release_124M_dir):
    return {
        "openai-community/gpt2": hub_repo_files(tmp_path / "src" / "gpt2", release_124M_dir, seed=1),
        "distilbert/distilgpt2": hub_repo_files(tmp_path / "src" / "distilgpt2", release_124M_dir, seed=2),
        "someone/llama-ish": hub_repo_files(tmp_path / "src" / "llama", release_124M_dir, seed=3, model_type="llama"),
        "someone/no-safetensors": {"config.json": b'{"model_type": "gpt2"}', "vocab.json": b"{}"},
    }


@pytest.fixture
def hub(repos, tmp_path, monkeypatch):
    """The fake Hub, running; HF_ENDPOINT points at it and HF_HUB_CACHE at an empty tmp_path/hf-cache."""
    server = FakeHub(repos)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # a fast shutdown
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    yield server
    server.shutdown()
    server.server_close()


def download_with_huggingface_hub(repo_id, endpoint, cache):
    for name in HUB_FILES:
        huggingface_hub.hf_hub_download(repo_id, name, cache_dir=cache, endpoint=endpoint)


# ------------------------------------------------------------------------------------------------------------
# Both ways with the real client
# ------------------------------------------------------------------------------------------------------------


def test_huggingface_hub_agrees_with_our_blob_names_so_it_downloads_nothing_more(hub, tmp_path):
    """Our blobs carry the ETags huggingface_hub would give them: asked online, it finds them and fetches no body."""
    resolve_model("distilgpt2", tmp_path / "models")
    hub.requests.clear()
    download_with_huggingface_hub("distilbert/distilgpt2", hub.url, tmp_path / "hf-cache")
    file_requests = [method for method, path in hub.requests if "/resolve/" in path or path.startswith("/lfs/")]
    assert file_requests == ["HEAD"] * len(HUB_FILES), hub.requests  # (some versions also ask an /api/ page)


def test_a_second_resolve_uses_no_network_and_a_partial_blob_is_resumed(hub, repos, tmp_path):
    repo_folder = tmp_path / "hf-cache" / "models--distilbert--distilgpt2"
    data = repos["distilbert/distilgpt2"]["model.safetensors"]
    sha256 = hashlib.sha256(data).hexdigest()
    (repo_folder / "blobs").mkdir(parents=True)
    (repo_folder / "blobs" / f"{sha256}.part").write_bytes(data[:1000])  # an earlier run cut short

    folder = resolve_model("distilgpt2", tmp_path / "models")
    assert (folder / "model.safetensors").read_bytes() == data
    assert ("GET", f"/lfs/{sha256}") in hub.requests
    hub.requests.clear()
    assert resolve_model("distilbert/distilgpt2", tmp_path / "models") == folder and hub.requests == []


def test_a_blob_whose_size_is_not_the_announced_one_is_deleted_and_refused(hub, tmp_path):
    hub.announced_extra = 1
    with pytest.raises(DownloadError, match="bytes where .* were announced"):
        resolve_model("gpt2", tmp_path / "models")
    repo_folder = tmp_path / "hf-cache" / "models--openai-community--gpt2"
    assert not (repo_folder / "refs" / "main").exists()
    assert not (repo_folder / "snapshots" / COMMIT / "model.safetensors").exists()
    assert all(blob.stat().st_size < 1000 for blob in (repo_folder / "blobs").iterdir())  # only config.json


def test_with_HF_HUB_OFFLINE_a_missing_model_is_an_error_without_any_request(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE"):
        resolve_model("gpt2", tmp_path / "models")
    assert hub.requests == []


def test_the_cache_folder_is_HF_HUB_CACHE_else_HF_HOME_hub_else_the_home_default(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "b"))
    assert hf_hub_cache() == tmp_path / "a"
    monkeypatch.delenv("HF_HUB_CACHE")
    assert hf_hub_cache() == tmp_path / "b" / "hub"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hf_hub_cache() == tmp_path / "home" / ".cache" / "huggingface" / "hub"


@pytest.mark.parametrize("name", ["124M", "1558M", "gpt2", "gpt2-xl", "distilgpt2", "openai-community/gpt2-large",
                                  "distilbert/distilgpt2", "someone/any-gpt2"])
def test_every_documented_name_passes_the_network_free_check(name):
    check_model_name(name)


# ------------------------------------------------------------------------------------------------------------
# main.py by name, and its one-line errors
# ------------------------------------------------------------------------------------------------------------


def run_main_in_process(tmp_path, *flags):
    import main

    main.run_command_line(["--models_dir", str(tmp_path / "models"), "--n_tokens_to_generate", "3",
                           "--temperature", "0", *flags])


def one_error_line(tmp_path, capsys, *flags):
    with pytest.raises(SystemExit) as exit_info:
        run_main_in_process(tmp_path, *flags)
    err = capsys.readouterr().err  # after the download's progress bars, if any: one line, no traceback
    errors = [line for line in err.split("\n") if line.startswith("error: ")]
    assert exit_info.value.code != 0 and len(errors) == 1 and err.endswith(errors[0] + "\n"), err
    assert "Traceback" not in err
    return errors[0]


def test_an_unknown_name_is_one_line_naming_it_and_listing_the_known_names(tmp_path, capsys):
    err = one_error_line(tmp_path, capsys, "--target_model_size", "gpt3")
    assert "'gpt3'" in err and all(name in err for name in ("124M", "gpt2-xl", "distilgpt2", "owner/name"))

