"""A server that drips its headers, a gzip body of several members, a release file that is not OpenAI's: every
wait ends by the deadline, every valid body is decoded whole, and nothing wrong gets a final name.

Read loaders/download.py first (exchange, Inflater, release_file_size, check_release_hparams): these tests are its
specification. `ScriptedServer` serves files on 127.0.0.1, each GET answered by a function of the test's choosing;
tests/test_hub_cache.py's FakeHub plays the Hub. No network.
"""

import gzip
import http.server
import json
import threading
import time

import pytest
import test_hub_cache
from test_hostile_hub import gpt2_files, repo_folder

from loaders.download import TOKENIZER_FILE_SIZES, DownloadError, download_file, download_gpt2_files
from utils import resolve_model
from loaders.weights import CheckpointError
from loaders.download import HPARAMS as DOWNLOAD_HPARAMS

hub, repos = test_hub_cache.hub, test_hub_cache.repos  # the fixtures: the fake Hub, and the repositories it serves
FAST = dict(retries=2, backoff_seconds=0.0, timeout_seconds=10.0)


def whole(handler, data):
    """The plain answer: 200, the size, the bytes."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class ScriptedServer(http.server.ThreadingHTTPServer):
    """Serve `files` ({url path: bytes}); `answers[path]`, a function of (handler, data), answers a GET of that
    path instead of `whole`. `gets` lists the paths asked for, in order."""

    daemon_threads = True  # a handler still dripping to a client that left never holds up the tests
    block_on_close = False

    def __init__(self, files):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.gets.append(self.path)
                if self.path not in server.files:
                    return self.send_error(404)
                server.answers.get(self.path, whole)(self, server.files[self.path])

        super().__init__(("127.0.0.1", 0), Handler)
        self.files, self.answers, self.gets = files, {}, []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self.shutdown()
        self.server_close()


def dripping_headers(handler, data, seconds=6.0):
    """The status line, then the headers one byte every half second (bounded here: `seconds`, or until the client
    leaves): requests' timeout of 10 s per read never trips."""
    try:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        handler.wfile.flush()
        for byte in f"Content-Length: {len(data)}\r\nX-Padding: {'x' * 100}\r\n".encode()[:int(seconds * 2)]:
            time.sleep(0.5)
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
    except OSError:
        pass  # the client left: what it must do


def test_headers_dripped_one_byte_every_half_second_are_cut_by_the_deadline(tmp_path):
    """The deadline bounds the whole exchange, not only the body: 1 s, where the server would drip for 6 s
    (and requests' per-read timeout of 10 s would never trip)."""
    with ScriptedServer({"/124M/checkpoint": b"x" * 100}) as server:
        server.answers["/124M/checkpoint"] = dripping_headers
        started = time.monotonic()
        with pytest.raises(DownloadError, match="took longer than the deadline of 1 seconds"):
            download_file(f"{server.url}/124M/checkpoint", tmp_path / "checkpoint", deadline_seconds=1, **FAST)
        assert time.monotonic() - started < 3
    assert not (tmp_path / "checkpoint").exists()


def test_a_hub_head_whose_headers_drip_is_cut_by_the_deadline(hub, tmp_path, monkeypatch):
    """The Hub's HEAD (the ETag and the commit) is an exchange too: the same deadline bounds it."""
    original = test_hub_cache.HubHandler.do_HEAD
    monkeypatch.setattr(test_hub_cache.HubHandler, "do_HEAD",
                        lambda handler: dripping_headers(handler, b"") if "config.json" in handler.path
                        else original(handler))
    started = time.monotonic()
    with pytest.raises(DownloadError, match="config.json did not answer within the deadline"):
        resolve_model("gpt2", tmp_path / "models", deadline_seconds=1)
    assert time.monotonic() - started < 3


def gzip_members(pieces):
    """A gzip body of one member per piece (RFC 1952 allows several; `cat a.gz b.gz` makes one), sent with its
    compressed size although the client asked for identity."""
    def answer(handler, data):
        body, start = b"", 0
        for size in pieces(data):
            body += gzip.compress(data[start:start + size])
            start += size
        assert gzip.decompress(body) == data  # valid gzip: Python's own reader takes every member
        handler.send_response(200)
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return answer


@pytest.mark.parametrize("pieces", [lambda data: [len(data) // 2, len(data) - len(data) // 2],
                                    lambda data: [1000, 0, len(data) - 1000]],
                         ids=["two_members", "three_members_one_empty"])
def test_a_gzip_body_of_several_members_arrives_whole_from_the_hub(hub, repos, tmp_path, pieces):
    hub.body_for["vocab.json"] = gzip_members(pieces)
    folder = resolve_model("gpt2", tmp_path / "models")
    assert (folder / "vocab.json").read_bytes() == gpt2_files(repos)["vocab.json"]


def test_a_gzip_body_of_two_members_arrives_whole_as_a_release_file(release_124M_dir, tmp_path):
    """Before, the first member only was kept, under the final name encoder.json (its size was not checked)."""
    data = (release_124M_dir / "encoder.json").read_bytes()
    with ScriptedServer({"/124M/encoder.json": data}) as server:
        server.answers["/124M/encoder.json"] = gzip_members(lambda data: [len(data) // 2, len(data) - len(data) // 2])
        download_file(f"{server.url}/124M/encoder.json", tmp_path / "encoder.json",
                      size=TOKENIZER_FILE_SIZES["encoder.json"], **FAST)
    assert (tmp_path / "encoder.json").read_bytes() == data


def release(release_124M_dir, **changes):
    """{url path: bytes} of the release files up to the index (the tests stop before the weights), with changes."""
    files = {name: (release_124M_dir / name).read_bytes()
             for name in ("checkpoint", "encoder.json", "hparams.json", "model.ckpt.index", "vocab.bpe")}
    files["model.ckpt.meta"] = b"(the graph; never read)"
    return {f"/124M/{name}": data for name, data in {**files, **changes}.items()}


def test_a_tokenizer_file_of_another_size_than_openais_never_gets_its_final_name(release_124M_dir, tmp_path):
    """The server announces and sends a vocab.bpe of 998 bytes: complete by its own account, but OpenAI's has
    456,318 bytes. Nothing is kept under vocab.bpe (before, it was, and every later run trusted it)."""
    files = release(release_124M_dir, **{"vocab.bpe": b"#version: 0.2\n" + b"a b\n" * 246})
    with ScriptedServer(files) as server, pytest.raises(DownloadError, match="vocab.bpe sent 998 bytes where 456318 "
                                                                             "were announced or known"):
        download_gpt2_files("124M", tmp_path / "124M", base_url=server.url, **FAST)
    assert not (tmp_path / "124M" / "vocab.bpe").exists() and not (tmp_path / "124M" / "vocab.bpe.part").exists()


def test_hparams_that_are_not_those_of_the_size_asked_for_never_get_their_final_name(release_124M_dir, tmp_path):
    """A mirror serving 355M's hparams.json as 124M's: refused before anything else is fetched."""
    files = release(release_124M_dir, **{"hparams.json": json.dumps(DOWNLOAD_HPARAMS["355M"]).encode()})
    with ScriptedServer(files) as server:
        with pytest.raises(DownloadError, match="124M/hparams.json is not OpenAI's hparams.json of 124M"):
            download_gpt2_files("124M", tmp_path / "124M", base_url=server.url, **FAST)
        assert server.gets == ["/124M/hparams.json"]
    assert not (tmp_path / "124M" / "hparams.json").exists()


def test_absurd_hparams_are_one_checkpoint_error_naming_the_file_and_nothing_is_kept(release_124M_dir, tmp_path):
    files = release(release_124M_dir, **{"hparams.json": json.dumps({**DOWNLOAD_HPARAMS["124M"], "n_head": 5}).encode()})
    with ScriptedServer(files) as server, pytest.raises(CheckpointError, match="hparams.json: n_head=5 does not divide"):
        download_gpt2_files("124M", tmp_path / "124M", base_url=server.url, **FAST)
    assert not (tmp_path / "124M").exists()  # nothing is kept, not even the folder the download made


def test_the_weights_must_have_the_size_the_index_gives_them(release_124M_dir, tmp_path):
    """The index of 124M ends its last tensor at byte 497,759,232: a data file announced 1,000 bytes long is
    refused before it gets its final name (before, it was kept, and the loader failed on every later run)."""
    files = release(release_124M_dir, **{"model.ckpt.data-00000-of-00001": b"\0" * 1000})
    with ScriptedServer(files) as server, pytest.raises(DownloadError, match="sent 1000 bytes where 497759232 were "
                                                                             "announced or known"):
        download_gpt2_files("124M", tmp_path / "124M", base_url=server.url, **FAST)
    assert not (tmp_path / "124M" / "model.ckpt.data-00000-of-00001").exists()
