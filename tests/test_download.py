"""The downloader against a real HTTP server on 127.0.0.1 that drops connections, fails, and resumes.

Read loaders/download.py first: these tests are its specification.

The server (`FlakyFileServer`) serves small random files under /124M/ the way OpenAI's bucket serves the
release, honours `Range: bytes=N-` with a 206, and can be told to misbehave: cut a file's body halfway after
announcing its full Content-Length, answer 500, ignore Range. It records every request, so the tests can
check what the downloader asked for. Backoff is 0, so the retries cost no time.
"""

import http.server
import json
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from loaders.download import MODEL_SIZES, RELEASE_FILES, TOKENIZER_FILE_SIZES, DownloadError, could_not_connect
from loaders.download import download_gpt2_files
from utils import resolve_model
from loaders.download import HPARAMS as DOWNLOAD_HPARAMS

DATA_FILE = "model.ckpt.data-00000-of-00001"
FAST = dict(retries=3, backoff_seconds=0.0, timeout_seconds=10.0)
HPARAMS = {"n_vocab": 50, "n_ctx": 16, "n_embd": 8, "n_head": 2, "n_layer": 2}


class FlakyFileServer:
    """Serve `files` ({url path: bytes}) on 127.0.0.1; misbehave as the attributes say."""

    def __init__(self, files, download_dir):
        self.files = files
        self.download_dir = download_dir  # where the client writes, to see its .part file at request time
        self.requests = []  # one dict per request: method, path, range, part_size (client's .part size then)
        self.cut_once = set()  # paths whose next GET sends half the body, then closes the connection
        self.fail_once = set()  # paths whose next GET answers 500
        self.always_fail = False  # every GET answers 500
        self.always_cut = set()  # paths whose every GET is cut halfway
        self.ignore_range = False  # answer 200 with the whole file even when asked for a range
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        self.thread = threading.Thread(target=self.http.serve_forever, args=(0.01,), daemon=True)  # fast shutdown

    def requests_for(self, filename):
        return [request for request in self.requests if request["path"].endswith("/" + filename)]

    def _handler_class(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output quiet
                pass

            def do_GET(self):
                part_path = Path(server.download_dir) / (self.path.rsplit("/", 1)[-1] + ".part")
                server.requests.append(
                    {
                        "method": "GET",
                        "path": self.path,
                        "range": self.headers.get("Range"),
                        "part_size": part_path.stat().st_size if part_path.exists() else None,
                    }
                )
                if server.always_fail or self.path in server.fail_once:
                    server.fail_once.discard(self.path)
                    self.send_error(500, "Internal Server Error (on purpose)")
                    return
                if self.path not in server.files:
                    self.send_error(404)
                    return
                body = server.files[self.path]
                start = 0
                range_header = self.headers.get("Range")
                if range_header and not server.ignore_range:
                    start = int(range_header.removeprefix("bytes=").removesuffix("-"))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                sent = body[start:]
                self.send_header("Content-Length", str(len(sent)))
                self.end_headers()
                if self.path in server.cut_once or self.path in server.always_cut:
                    server.cut_once.discard(self.path)
                    self.wfile.write(sent[: len(sent) // 2])
                    self.wfile.flush()
                    self.close_connection = True  # the client sees the connection end mid-body
                    return
                self.wfile.write(sent)

        return Handler


@pytest.fixture
def release(tmp_path, monkeypatch):
    """Random stand-ins for the seven release files, written to tmp_path/served/124M/: {name: bytes}. The
    tokenizer's files have their known sizes; the tiny HPARAMS play those of 124M (DOWNLOAD_HPARAMS)."""
    rng = np.random.default_rng(0)
    sizes = {name: int(rng.integers(1_000, 20_000)) for name in RELEASE_FILES}
    sizes.update(TOKENIZER_FILE_SIZES)
    sizes[DATA_FILE] = 300_000  # the big one, cut halfway in the tests
    monkeypatch.setitem(DOWNLOAD_HPARAMS, "124M", HPARAMS)
    served = tmp_path / "served" / "124M"
    served.mkdir(parents=True)
    contents = {}
    for name, size in sizes.items():
        contents[name] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        (served / name).write_bytes(contents[name])
    contents["hparams.json"] = json.dumps(HPARAMS).encode()  # checked before the weights are downloaded
    (served / "hparams.json").write_bytes(contents["hparams.json"])
    return contents


@pytest.fixture
def server(release, tmp_path):
    model_dir = tmp_path / "models" / "124M"
    flaky = FlakyFileServer({f"/124M/{name}": data for name, data in release.items()}, model_dir)
    flaky.thread.start()
    yield flaky
    flaky.http.shutdown()
    flaky.http.server_close()
    flaky.thread.join()


def assert_all_files_arrived(model_dir, release):
    for name, data in release.items():
        assert (model_dir / name).read_bytes() == data, name
        assert not (model_dir / (name + ".part")).exists(), name


def test_files_arrive_byte_identical_despite_a_cut_connection_and_a_500(server, release, tmp_path):
    model_dir = tmp_path / "models" / "124M"
    server.cut_once.add(f"/124M/{DATA_FILE}")
    server.fail_once.add("/124M/hparams.json")

    download_gpt2_files("124M", model_dir, base_url=server.url, **FAST)

    assert_all_files_arrived(model_dir, release)
    assert len(server.requests_for("hparams.json")) == 2  # the 500, then the file
    first, resumed = server.requests_for(DATA_FILE)
    assert first["range"] is None
    # The second request resumes exactly where the partial file ended, and that partial file was not empty.
    assert 0 < resumed["part_size"] <= len(release[DATA_FILE]) // 2
    assert resumed["range"] == f"bytes={resumed['part_size']}-"


def test_a_server_that_ignores_range_makes_the_download_start_over_from_zero(server, release, tmp_path):
    """The server answers the resumed request with 200 and the whole file: append nothing, rewrite it."""
    model_dir = tmp_path / "models" / "124M"
    server.cut_once.add(f"/124M/{DATA_FILE}")
    server.ignore_range = True

    download_gpt2_files("124M", model_dir, base_url=server.url, **FAST)

    assert_all_files_arrived(model_dir, release)
    assert server.requests_for(DATA_FILE)[1]["range"] is not None  # we asked to resume; it was ignored


def test_complete_files_are_not_fetched_again(server, release, tmp_path):
    model_dir = tmp_path / "models" / "124M"
    download_gpt2_files("124M", model_dir, base_url=server.url, **FAST)
    assert len(server.requests) == len(RELEASE_FILES)

    (model_dir / "vocab.bpe").unlink()  # one file missing: only that one is fetched
    download_gpt2_files("124M", model_dir, base_url=server.url, **FAST)

    assert len(server.requests) == len(RELEASE_FILES) + 1
    assert server.requests[-1]["path"] == "/124M/vocab.bpe"
    assert_all_files_arrived(model_dir, release)


def test_the_base_url_can_come_from_the_environment(server, release, tmp_path, monkeypatch):
    monkeypatch.setenv("GPT2_BASE_URL", server.url + "/")  # a trailing slash is fine too
    model_dir = tmp_path / "models" / "124M"
    download_gpt2_files("124M", model_dir, **FAST)
    assert_all_files_arrived(model_dir, release)


def test_a_permanently_failing_server_gives_DownloadError_naming_url_and_folder(server, tmp_path):
    model_dir = tmp_path / "models" / "124M"
    server.always_fail = True

    with pytest.raises(DownloadError) as error:
        download_gpt2_files("124M", model_dir, base_url=server.url, **FAST)

    message = str(error.value)
    assert f"{server.url}/124M/hparams.json" in message  # the first file asked for
    assert str(model_dir) in message
    assert f"download the files by hand from {server.url}/124M into {model_dir}" in message
    assert len(server.requests) == FAST["retries"] + 1  # one try plus the retries, then it gives up
    assert not (tmp_path / "models").exists()  # nothing arrived: the folders it made are gone again


def test_a_connection_that_always_drops_leaves_only_a_part_file(server, release, tmp_path):
    """Every attempt at the data file is cut short: DownloadError, and no file that looks complete."""
    model_dir = tmp_path / "models" / "124M"
    server.always_cut.add(f"/124M/{DATA_FILE}")

    with pytest.raises(DownloadError, match=DATA_FILE):
        download_gpt2_files("124M", model_dir, base_url=server.url, **FAST)

    assert not (model_dir / DATA_FILE).exists()
    part_size = (model_dir / (DATA_FILE + ".part")).stat().st_size
    assert 0 < part_size < len(release[DATA_FILE])


def refused_url():
    """http://127.0.0.1:PORT where nothing listens: a port the system just gave out, closed again, so every
    connection is refused at once, as with no network."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_no_server_at_all_leaves_no_folder_behind_and_says_it_could_not_connect(tmp_path):
    """Offline: the first request is refused. The error says so in words, and models/ and models/124M, which the
    download made, are removed again: a later run, or the user, finds no empty folder that looks like a model."""
    url = refused_url()
    with pytest.raises(DownloadError) as error:
        download_gpt2_files("124M", tmp_path / "models" / "124M", base_url=url, **FAST)
    assert f"could not connect to {url.split('//')[1]} (" in str(error.value)
    assert could_not_connect(error.value)
    assert list(tmp_path.iterdir()) == []


def test_each_wait_before_a_retry_says_what_failed_and_how_long_it_waits(tmp_path, capsys):
    """Offline, 3 retries waited in silence for 1 + 2 + 4 seconds (classroom.py tokenizer: 31 s without a word):
    each wait is a line on stderr first, the failure and the seconds, then the one error."""
    url = refused_url()
    with pytest.raises(DownloadError):
        download_gpt2_files("124M", tmp_path / "models" / "124M", base_url=url, **FAST)
    lines = capsys.readouterr().err.splitlines()
    host = url.split("//")[1]
    assert [line.split(": ", 1)[1] for line in lines] == [
        f"could not connect to {host} (Connection refused); trying again in 0 s (retry {n} of 3)" for n in (1, 2, 3)]
    assert all(line.startswith(f"{url}/124M/") for line in lines), lines


def test_a_failed_download_keeps_every_folder_it_did_not_make_and_every_file_in_them(tmp_path):
    """Only the folders the download made, and only while empty, are removed: models/ existed (empty), and
    models/124M held the user's note: both stay."""
    (tmp_path / "models").mkdir()
    with pytest.raises(DownloadError):
        download_gpt2_files("124M", tmp_path / "models" / "124M", base_url=refused_url(), **FAST)
    assert list(tmp_path.iterdir()) == [tmp_path / "models"] and list((tmp_path / "models").iterdir()) == []
    (tmp_path / "models" / "124M").mkdir()
    (tmp_path / "models" / "124M" / "notes.txt").write_text("mine")
    with pytest.raises(DownloadError):
        download_gpt2_files("124M", tmp_path / "models" / "124M", base_url=refused_url(), **FAST)
    assert [path.name for path in (tmp_path / "models" / "124M").iterdir()] == ["notes.txt"]


def test_a_server_that_answers_errors_is_not_taken_for_no_network(server, tmp_path):
    """A 500 on every attempt came over a connection: could_not_connect is False (main.py then does not say
    to work offline)."""
    server.always_fail = True
    with pytest.raises(DownloadError) as error:
        download_gpt2_files("124M", tmp_path / "models" / "124M", base_url=server.url, **FAST)
    assert not could_not_connect(error.value)


def test_a_missing_file_fails_at_once_without_retries(server, tmp_path):
    """A 404 will not get better by asking again."""
    del server.files["/124M/hparams.json"]  # the first file asked for
    with pytest.raises(DownloadError, match="404"):
        download_gpt2_files("124M", tmp_path / "models" / "124M", base_url=server.url, **FAST)
    assert len(server.requests) == 1


def test_an_unknown_model_size_is_a_ValueError_listing_the_sizes(tmp_path):
    """resolve_model is the one place that understands names; it refuses before any download."""
    with pytest.raises(ValueError) as error:
        resolve_model("125M", tmp_path)
    for size in MODEL_SIZES:
        assert size in str(error.value)
