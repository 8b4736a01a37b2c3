"""A hostile Hub, a damaged cache: nothing wrong is ever loaded, nothing is written outside the cache, every

Read loaders/hub.py and loaders/download.py first: these tests are its specification.

failure is one line.

Each test plays one way a flaky network, a crashed download, a hand-edited cache or a hostile mirror
($HF_ENDPOINT) can go wrong, against tests/test_hub_cache.py's FakeHub (made hostile file by file with its
`headers_for` and `body_for`) and a cache in tmp_path. What must hold in every case:
- a file is used only if its bytes hash to its name (the Hub's ETag: a sha256, or a small file's git blob id);
- nothing is written outside the cache: the names that become paths are checked, no link is followed out;
- a damaged cache heals on the next run, or the one error line names exactly the file to delete;
- a failure is one DownloadError, CheckpointError or ValueError (main.py: one `error:` line, exit code 1 for a
  download or a damaged file, 2 for bad input);
- downloads are bounded: the announced size, a cap per kind of file, an overall deadline per file.
"""

import gzip
import hashlib
import json
import os
import time
import zlib

import pytest
import test_hub_cache
from test_hub_cache import COMMIT, run_main_in_process
from test_main import TINY_HPARAMS, tiny_params, write_hf_folder

from loaders.download import DownloadError, download_gpt2_files
from loaders.hub import HUB_FILES
from utils import load_model, resolve_model
from loaders.weights import MAX_CONFIG_BYTES, CheckpointError

huggingface_hub = pytest.importorskip("huggingface_hub")

OTHER_COMMIT = "f" * 40
hub, repos = test_hub_cache.hub, test_hub_cache.repos  # the fixtures: the fake Hub, and the repositories it serves


def repo_folder(tmp_path, repo="openai-community/gpt2"):
    return tmp_path / "hf-cache" / ("models--" + repo.replace("/", "--"))


def gpt2_files(repos):
    return repos["openai-community/gpt2"]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def outside(tmp_path):
    """A folder outside the cache that a hostile answer or a hand-made link points at: it must stay as it is."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "precious.txt").write_text("precious")
    return folder


def assert_untouched(outside):
    assert sorted(path.name for path in outside.iterdir()) == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "precious"


def lfs_gets(hub, data):
    """The indexes of the GETs of a large file's bytes, in hub.requests."""
    return [i for i, request in enumerate(hub.requests) if request == ("GET", f"/lfs/{sha256(data)}")]


# ------------------------------------------------------------------------------------------------------------
# Silent wrong results: a blob must hash to its name; a tokenizer must agree with itself and with the model
# ------------------------------------------------------------------------------------------------------------


def test_a_zeroed_part_left_by_a_crash_is_fetched_afresh_not_renamed_to_its_blob(hub, repos, tmp_path):
    """The crash left half the file as zeros: resumed, the whole does not hash to its sha256, so it is fetched
    once more from byte 0, and the snapshot holds the Hub's bytes."""
    data = gpt2_files(repos)["model.safetensors"]
    blobs = repo_folder(tmp_path) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{sha256(data)}.part").write_bytes(bytes(len(data) // 2))

    folder = resolve_model("gpt2", tmp_path / "models")

    assert (folder / "model.safetensors").read_bytes() == data
    resumed, afresh = lfs_gets(hub, data)
    assert hub.request_headers[resumed]["Range"] == f"bytes={len(data) // 2}-"
    assert "Range" not in hub.request_headers[afresh]


@pytest.mark.parametrize("name", ["model.safetensors", "merges.txt", "config.json"])
def test_a_blob_damaged_in_the_cache_is_deleted_and_fetched_again_on_the_next_run(hub, repos, tmp_path, capsys,
                                                                                  name):
    """One flipped bit, same size: the blob no longer hashes to its name. The next run says so, deletes it,
    downloads it again, and the result is a cache huggingface_hub reads without a request."""
    folder = resolve_model("gpt2", tmp_path / "models")
    blob = (folder / name).resolve()
    damaged = bytearray(blob.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    blob.write_bytes(bytes(damaged))
    hub.requests.clear()

    assert resolve_model("gpt2", tmp_path / "models") == folder

    assert (folder / name).read_bytes() == gpt2_files(repos)[name]
    assert f"{blob} is damaged" in capsys.readouterr().err
    assert any(method == "GET" for method, _ in hub.requests)
    for file in HUB_FILES:
        path = huggingface_hub.hf_hub_download("openai-community/gpt2", file, cache_dir=tmp_path / "hf-cache",
                                               local_files_only=True)
        with open(path, "rb") as file_bytes:
            assert file_bytes.read() == gpt2_files(repos)[file]


@pytest.mark.parametrize("name, header, etag", [
    ("model.safetensors", "X-Linked-Etag", '"' + "0" * 64 + '"'),
    ("vocab.json", "ETag", '"' + "1" * 40 + '"'),
], ids=["sha256", "git_blob_id"])
def test_bytes_that_do_not_hash_to_their_etag_are_refused_and_nothing_is_kept(hub, tmp_path, name, header, etag):
    hub.headers_for[name] = {header: etag}
    with pytest.raises(DownloadError, match=f"{name} sent bytes whose .* is not its ETag {etag.strip(chr(34))}"):
        resolve_model("gpt2", tmp_path / "models")
    folder = repo_folder(tmp_path)
    assert not (folder / "refs" / "main").exists()
    assert not any(path.name.startswith(etag.strip('"')) for path in (folder / "blobs").iterdir())


def tokenizer_folder(tmp_path, release_124M_dir, hf_names):
    """A tiny model with GPT-2's tokenizer, under OpenAI's file names or Hugging Face's, and an empty
    model.safetensors: a tokenizer error must come before any weight is read."""
    folder = write_hf_folder(tmp_path / "model", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)
    if hf_names:
        (folder / "encoder.json").rename(folder / "vocab.json")
        (folder / "vocab.bpe").rename(folder / "merges.txt")
    (folder / "model.safetensors").write_bytes(b"")
    return folder, folder / ("merges.txt" if hf_names else "vocab.bpe"), folder / ("vocab.json" if hf_names else
                                                                                   "encoder.json")


@pytest.mark.parametrize("hf_names", [False, True], ids=["openai_names", "hf_names"])
@pytest.mark.parametrize("cut", ["at_a_line", "inside_a_line", "empty"])
def test_a_cut_short_or_empty_merges_file_is_refused_at_load_naming_it(release_124M_dir, tmp_path, hf_names, cut):
    """Accepted, a merges file cut at a line made the default prompt 12 or 17 tokens instead of 10."""
    folder, merges, _ = tokenizer_folder(tmp_path, release_124M_dir, hf_names)
    text = merges.read_text(encoding="utf-8")
    cut_text = {"at_a_line": text[: text.index("\n", len(text) // 2) + 1],
                "inside_a_line": text[: text.index("\n", len(text) // 2) + 3], "empty": ""}[cut]
    merges.write_text(cut_text, encoding="utf-8")
    with pytest.raises(CheckpointError, match=merges.name):
        load_model(folder)


@pytest.mark.parametrize("hf_names", [False, True], ids=["openai_names", "hf_names"])
def test_a_vocabulary_with_an_id_out_of_range_is_refused_at_load(release_124M_dir, tmp_path, hf_names):
    folder, _, vocab_path = tokenizer_folder(tmp_path, release_124M_dir, hf_names)
    vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    vocab["Hello"] = 99999
    vocab_path.write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(CheckpointError, match=f"{vocab_path.name} does not number its 50257 symbols 0 .. 50256"):
        load_model(folder)


def test_a_config_whose_n_vocab_is_not_the_tokenizers_size_is_refused_at_load(release_124M_dir, tmp_path):
    folder, _, _ = tokenizer_folder(tmp_path, release_124M_dir, hf_names=True)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 1000}))
    with pytest.raises(CheckpointError, match="50257 symbols but config.json says n_vocab=1000"):
        load_model(folder)


def test_a_mismatched_tokenizer_is_one_error_line_with_exit_code_1(release_124M_dir, tmp_path, capsys):
    folder, merges, _ = tokenizer_folder(tmp_path, release_124M_dir, hf_names=False)
    merges.write_text("", encoding="utf-8")
    line, code = main_error(tmp_path, capsys, "--drafter", "lookup", "--target_model_size", str(folder))
    assert code == 1 and str(merges) in line


def main_error(tmp_path, capsys, *flags):
    """(the one `error:` line, the exit code) of main.py run with `flags`; no traceback, nothing after it."""
    with pytest.raises(SystemExit) as exit_info:
        run_main_in_process(tmp_path, *flags)
    err = capsys.readouterr().err
    errors = [line for line in err.split("\n") if line.startswith("error: ")]
    assert len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err, err
    return errors[0], exit_info.value.code


# ------------------------------------------------------------------------------------------------------------
# Writing where it should not: the announced size, names that are paths, links out of the cache
# ------------------------------------------------------------------------------------------------------------


def endless_body(handler, data, content_length=None):
    """A 200 whose body never ends (bounded here: 64 MB at most, or until the client leaves)."""
    handler.send_response(200)
    handler.send_header("Connection", "close")
    handler.end_headers()
    try:
        for _ in range(1024):
            handler.wfile.write(data[:64 * 1024].ljust(64 * 1024, b" "))
    except OSError:
        pass  # the client stopped reading: what it must do


def largest_file(folder):
    return max((path.stat().st_size for path in folder.rglob("*") if path.is_file()), default=0)


def test_a_body_that_never_ends_is_cut_at_the_announced_size(hub, repos, tmp_path):
    """The HEAD announces vocab.json's 1 MB; the GET streams on: reading stops there, nothing larger is kept."""
    hub.body_for["vocab.json"] = endless_body
    size = len(gpt2_files(repos)["vocab.json"])
    with pytest.raises(DownloadError, match=f"vocab.json sends more than the {size} bytes expected"):
        resolve_model("gpt2", tmp_path / "models")
    assert largest_file(repo_folder(tmp_path) / "blobs") <= len(gpt2_files(repos)["model.safetensors"])
    assert not list((repo_folder(tmp_path) / "blobs").glob("*.part"))


def test_a_file_announced_without_a_size_stops_at_the_cap_of_its_kind(hub, tmp_path):
    hub.headers_for["config.json"] = {"Content-Length": None}
    hub.body_for["config.json"] = endless_body
    with pytest.raises(DownloadError, match=f"config.json sends more than the {MAX_CONFIG_BYTES} bytes expected"):
        resolve_model("gpt2", tmp_path / "models")


NOT_IDS = {
    "commit_dotdot": ("config.json", "X-Repo-Commit", ".."),
    "commit_dot": ("config.json", "X-Repo-Commit", "."),
    "commit_path": ("config.json", "X-Repo-Commit", "../../../outside"),
    "commit_short": ("config.json", "X-Repo-Commit", "abc123"),
    "etag_dot": ("config.json", "ETag", '"."'),
    "etag_dotdot": ("config.json", "ETag", '".."'),
    "etag_300_characters": ("config.json", "ETag", '"' + "a" * 300 + '"'),
    "etag_path": ("vocab.json", "ETag", '"../../../outside/x"'),
    "linked_etag_dotdot": ("model.safetensors", "X-Linked-Etag", '".."'),
    "linked_etag_uppercase": ("model.safetensors", "X-Linked-Etag", '"' + "A" * 64 + '"'),
}


@pytest.mark.parametrize("name, header, value", NOT_IDS.values(), ids=NOT_IDS.keys())
def test_a_commit_or_etag_that_is_not_a_hexadecimal_id_is_refused_before_it_names_a_path(hub, tmp_path, outside,
                                                                                         name, header, value):
    hub.headers_for[name] = {header: value}
    with pytest.raises(DownloadError, match="is not a hexadecimal id"):
        resolve_model("gpt2", tmp_path / "models")
    assert_untouched(outside)
    folder = repo_folder(tmp_path)
    assert not (folder / "refs").exists() and sorted(os.listdir(folder)) == ["blobs", "snapshots"]
    assert set(os.listdir(folder / "snapshots")) <= {COMMIT}


@pytest.mark.parametrize("linked", ["snapshots/" + COMMIT, "snapshots", "refs"])
def test_a_cache_folder_that_is_a_link_out_of_the_cache_is_replaced_not_written_through(hub, repos, tmp_path,
                                                                                        outside, linked):
    """(The repository folder and its blobs/ are the two links huggingface_hub follows, and so does this project:
    tests/test_hostile_writes.py.)"""
    folder = repo_folder(tmp_path)
    link = folder / linked if linked != "." else folder
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)

    snapshot = resolve_model("gpt2", tmp_path / "models")

    assert_untouched(outside)
    assert not link.is_symlink() and link.is_dir()
    assert (snapshot / "model.safetensors").read_bytes() == gpt2_files(repos)["model.safetensors"]


@pytest.mark.parametrize("ref", ["../../../outside", "ABSOLUTE", "main", "", COMMIT.upper()])
def test_a_refs_main_that_is_not_a_commit_id_is_never_followed_and_is_rewritten(hub, repos, tmp_path, outside, ref):
    """refs/main is the only name the cache reads without asking the Hub: unless it is a commit id, nothing in
    it is used (not even a whole model where it points); the download that follows rewrites it."""
    for name, data in repos["distilbert/distilgpt2"].items():
        (outside / name).write_bytes(data)
    folder = repo_folder(tmp_path)
    for sub in ("refs", "snapshots", "blobs"):  # an earlier download's folders: a path through them resolves
        (folder / sub).mkdir(parents=True)
    (folder / "refs" / "main").write_text(str(outside) if ref == "ABSOLUTE" else ref)

    snapshot = resolve_model("gpt2", tmp_path / "models")

    assert snapshot == folder / "snapshots" / COMMIT and hub.requests
    assert (folder / "refs" / "main").read_text() == COMMIT


@pytest.mark.parametrize("kind", ["link_to_a_file_outside", "link_loop", "not_utf_8", "named_pipe"])
def test_a_broken_refs_main_is_replaced_and_a_file_it_links_to_is_untouched(hub, tmp_path, outside, kind):
    ref = repo_folder(tmp_path) / "refs" / "main"
    ref.parent.mkdir(parents=True)
    if kind == "link_to_a_file_outside":
        ref.symlink_to(outside / "precious.txt")
    elif kind == "link_loop":
        ref.symlink_to(ref)
    elif kind == "named_pipe":  # opened for reading, it would wait for a writer forever
        os.mkfifo(ref)
    else:
        ref.write_bytes(b"\xff\xfe" + COMMIT.encode())

    resolve_model("gpt2", tmp_path / "models")

    assert not ref.is_symlink() and ref.read_text() == COMMIT
    assert_untouched(outside)


def test_a_refs_main_that_is_a_folder_is_one_error_naming_it(hub, tmp_path, capsys):
    ref = repo_folder(tmp_path) / "refs" / "main"
    (ref / "inside").mkdir(parents=True)
    line, code = main_error(tmp_path, capsys, "--drafter", "lookup", "--target_model_size", "gpt2")
    assert code == 1 and f"{ref} is a folder" in line and "delete it" in line


def test_a_blob_that_is_a_folder_is_one_error_line_naming_it(hub, tmp_path, capsys):
    resolve_model("gpt2", tmp_path / "models")
    blob = (repo_folder(tmp_path) / "snapshots" / COMMIT / "vocab.json").resolve()
    blob.unlink()
    (blob / "inside").mkdir(parents=True)
    line, code = main_error(tmp_path, capsys, "--drafter", "lookup", "--target_model_size", "gpt2")
    assert code == 1 and f"{blob} is a folder where a file belongs: delete it" in line


def test_files_beside_the_four_in_a_snapshot_are_never_read(hub, repos, tmp_path, outside):
    """transformers may have put more files in the snapshot; a hand-made hparams.json or encoder.json there (a
    link out of the cache, a tokenizer of its own) must not change what is loaded."""
    folder = resolve_model("gpt2", tmp_path / "models")
    (folder / "hparams.json").symlink_to(outside / "precious.txt")
    (folder / "encoder.json").write_text("{}")
    encoder, hparams, _ = load_model(resolve_model("gpt2", tmp_path / "models"))
    assert hparams == TINY_HPARAMS and encoder.encode("Hello world") == [15496, 995]
    assert_untouched(outside)


def test_every_file_after_the_first_is_asked_for_at_the_commit_the_first_answer_named(hub, tmp_path):
    resolve_model("gpt2", tmp_path / "models")
    heads = [path for method, path in hub.requests if method == "HEAD"]
    assert heads[0] == "/openai-community/gpt2/resolve/main/config.json"
    assert all(f"/resolve/{COMMIT}/" in path for path in heads[1:]) and len(heads) == len(HUB_FILES)


def test_a_file_answered_for_another_commit_is_refused_and_nothing_is_filed_under_the_first(hub, tmp_path):
    """The repository moved on between two requests: vocab.json comes back for another commit."""
    hub.headers_for["vocab.json"] = {"X-Repo-Commit": OTHER_COMMIT}
    with pytest.raises(DownloadError, match=f"answered for commit {OTHER_COMMIT}, not the {COMMIT} asked for"):
        resolve_model("gpt2", tmp_path / "models")
    folder = repo_folder(tmp_path)
    assert not (folder / "refs" / "main").exists()
    assert not (folder / "snapshots" / COMMIT / "vocab.json").exists()


# ------------------------------------------------------------------------------------------------------------
# A cache that heals, or an error that names the file to delete
# ------------------------------------------------------------------------------------------------------------


def test_a_damaged_file_reached_through_a_snapshot_link_is_named_by_its_blob_and_deleting_that_heals(hub, repos,
                                                                                                 tmp_path):
    folder = resolve_model("gpt2", tmp_path / "models")
    blob = (folder / "model.safetensors").resolve()
    blob.write_bytes(blob.read_bytes()[:1000])  # damaged after the download, loaded without resolving again

    with pytest.raises(CheckpointError) as error:
        load_model(folder)

    assert f"delete {blob} and run again" in str(error.value)
    blob.unlink()  # as the line says
    _, _, params = load_model(resolve_model("gpt2", tmp_path / "models"))
    assert params["wte"].shape == (TINY_HPARAMS["n_vocab"], TINY_HPARAMS["n_embd"])


@pytest.mark.parametrize("target", ["dangling", "loop", "outside", "another_blob"])
def test_a_bad_snapshot_link_is_replaced_on_the_next_run(hub, repos, tmp_path, outside, target):
    folder = resolve_model("gpt2", tmp_path / "models")
    link = folder / "model.safetensors"
    link.unlink()
    link.symlink_to({"dangling": f"../../blobs/{'0' * 64}", "loop": str(link), "outside": str(outside / "precious.txt"),
                     "another_blob": os.readlink(folder / "config.json")}[target])

    assert resolve_model("gpt2", tmp_path / "models") == folder

    assert os.readlink(link) == f"../../blobs/{sha256(gpt2_files(repos)['model.safetensors'])}"
    assert_untouched(outside)


# ------------------------------------------------------------------------------------------------------------
# Every other failure: one line naming the file or URL
# ------------------------------------------------------------------------------------------------------------


def redirect_to(location):
    def answer(handler, data):
        handler.send_response(302)
        handler.send_header("Location", location(handler) if callable(location) else location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
    return answer


def test_a_redirect_loop_is_one_download_error_naming_the_url(hub, tmp_path):
    hub.body_for["model.safetensors"] = redirect_to(lambda handler: handler.path)
    with pytest.raises(DownloadError, match="model.safetensors redirects in a loop"):
        resolve_model("gpt2", tmp_path / "models")


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://127.0.0.1/model.safetensors"])
def test_a_redirect_to_a_url_that_is_not_http_is_refused(hub, tmp_path, location):
    hub.body_for["model.safetensors"] = redirect_to(location)
    with pytest.raises(DownloadError, match="leads to a URL that is not http:// or https://"):
        resolve_model("gpt2", tmp_path / "models")


def test_a_redirect_to_a_location_that_is_not_utf_8_is_one_download_error_naming_the_url(hub, tmp_path):
    hub.body_for["model.safetensors"] = redirect_to("\xe9")  # sent as the single byte 0xe9
    with pytest.raises(DownloadError, match="model.safetensors cannot be fetched"):
        resolve_model("gpt2", tmp_path / "models")


def test_a_config_json_of_100000_nested_arrays_is_one_error_naming_it(hub, repos, tmp_path):
    gpt2_files(repos)["config.json"] = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(DownloadError, match="openai-community/gpt2's config.json .* is refused: not a GPT-2 config"):
        resolve_model("gpt2", tmp_path / "models")


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME"])
@pytest.mark.parametrize("where", ["a_file", "under_a_file"])
def test_an_hf_cache_variable_that_cannot_name_a_folder_is_one_line_naming_it_before_any_work(
        hub, tmp_path, capsys, monkeypatch, where, variable):
    """HF_HUB_CACHE=/etc/passwd said "File exists", exit code 1, once a download had begun. It is bad input: one
    line naming the variable and its value, exit code 2, with the flags."""
    (tmp_path / "a_file").write_text("not a folder")
    cache = tmp_path / "a_file" if where == "a_file" else tmp_path / "a_file" / "hub"
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv(variable, str(cache))
    line, code = main_error(tmp_path, capsys, "--drafter", "lookup", "--target_model_size", "gpt2")
    assert code == 2 and line.startswith(f"error: ${variable}='{cache}': {tmp_path / 'a_file'} is not a folder")
    assert f"point {variable} at a folder" in line and hub.requests == []  # checked before any download


def test_an_unwritable_hf_hub_cache_is_one_download_error_naming_it(hub, tmp_path, monkeypatch, read_only_folder):
    cache = read_only_folder / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    with pytest.raises(DownloadError, match=f"cannot write into {cache}"):
        resolve_model("gpt2", tmp_path / "models")


@pytest.mark.parametrize("name, header, value", [
    ("config.json", "Content-Length", "abc"),
    ("config.json", "Content-Length", "5" * 5000),
    ("config.json", "Content-Length", "-1"),
    ("model.safetensors", "X-Linked-Size", "1e6"),
], ids=["letters", "5000_digits", "negative", "exponent"])
def test_a_size_header_that_is_not_a_number_of_bytes_is_one_download_error_naming_the_url(hub, tmp_path, name,
                                                                                          header, value):
    hub.headers_for[name] = {header: value}
    with pytest.raises(DownloadError, match=f"{name} sent a {header} header that is not a size in bytes"):
        resolve_model("gpt2", tmp_path / "models")


# ------------------------------------------------------------------------------------------------------------
# Bounded: caps on small files, sizes checked before the weights, an overall deadline per file
# ------------------------------------------------------------------------------------------------------------


def test_a_config_json_announced_larger_than_its_cap_is_refused_without_fetching_it(hub, tmp_path):
    hub.headers_for["config.json"] = {"Content-Length": str(64 << 20)}
    with pytest.raises(DownloadError, match=f"announces {64 << 20} bytes, more than the {MAX_CONFIG_BYTES}"):
        resolve_model("gpt2", tmp_path / "models")
    assert [method for method, _ in hub.requests] == ["HEAD"]


def test_a_local_config_json_larger_than_its_cap_is_refused_unread(tmp_path, release_124M_dir):
    folder = write_hf_folder(tmp_path / "model", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "padding": " " * MAX_CONFIG_BYTES}))
    with pytest.raises(CheckpointError, match=f"config.json: it has [0-9]+ bytes, more than the {MAX_CONFIG_BYTES}"):
        load_model(folder)


@pytest.mark.parametrize("change", [{"n_embd": 0}, {"n_layer": 10**6}, {"n_head": 3}], ids=str)
def test_a_config_with_absurd_sizes_is_refused_before_the_weights_are_downloaded(hub, repos, tmp_path, change):
    config = json.loads(gpt2_files(repos)["config.json"])
    gpt2_files(repos)["config.json"] = json.dumps({**config, **change}).encode()
    with pytest.raises(DownloadError, match=f"config.json .* is refused: .*{next(iter(change))}"):
        resolve_model("gpt2", tmp_path / "models")
    assert not lfs_gets(hub, gpt2_files(repos)["model.safetensors"])


def test_openais_hparams_json_with_a_million_layers_is_refused_before_the_weights_are_downloaded(tmp_path):
    from test_download import FlakyFileServer

    hparams = {**TINY_HPARAMS, "n_layer": 10**6}
    files = {f"/124M/{name}": b"x" for name in ("checkpoint", "encoder.json", "model.ckpt.index", "model.ckpt.meta",
                                                "vocab.bpe", "model.ckpt.data-00000-of-00001")}
    files["/124M/hparams.json"] = json.dumps(hparams).encode()
    server = FlakyFileServer(files, tmp_path / "models" / "124M")
    server.thread.start()
    try:
        with pytest.raises(CheckpointError, match="hparams.json: n_layer is 1000000"):
            download_gpt2_files("124M", tmp_path / "models" / "124M", base_url=server.url, backoff_seconds=0)
    finally:
        server.http.shutdown()
        server.http.server_close()
    assert not server.requests_for("model.ckpt.data-00000-of-00001")


def dripping_body(handler, data):
    """The right size announced, then one byte every 20 ms (bounded here: 500 bytes, 10 s, or until the client
    leaves)."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    try:
        for byte in data[:500]:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.02)
    except OSError:
        pass


@pytest.mark.parametrize("how", ["parameter", "environment"])
def test_a_server_that_drips_bytes_is_stopped_by_the_deadline_and_the_part_is_kept(hub, repos, tmp_path,
                                                                                   monkeypatch, how):
    """500 bytes at 20 ms each would take 10 s, far more than the deadline of 0.3 s: the download stops
    there, keeps what it got for the next run, and says how to raise the deadline."""
    hub.body_for["model.safetensors"] = dripping_body
    if how == "environment":
        monkeypatch.setenv("GPT2_DOWNLOAD_DEADLINE", "0.3")
    with pytest.raises(DownloadError, match="took longer than the deadline of 0.3 seconds .*GPT2_DOWNLOAD_DEADLINE"):
        resolve_model("gpt2", tmp_path / "models", deadline_seconds=0.3 if how == "parameter" else None)
    part = repo_folder(tmp_path) / "blobs" / f"{sha256(gpt2_files(repos)['model.safetensors'])}.part"
    assert 0 < part.stat().st_size < 500


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan", "1" * 5000])
def test_a_deadline_that_is_not_a_positive_number_of_seconds_is_a_value_error_naming_it(hub, tmp_path, monkeypatch,
                                                                                       value):
    monkeypatch.setenv("GPT2_DOWNLOAD_DEADLINE", value)
    with pytest.raises(ValueError, match="GPT2_DOWNLOAD_DEADLINE must be a number of seconds > 0"):
        resolve_model("gpt2", tmp_path / "models")
    assert hub.requests == []


def compressed_body(encoding, extra=b""):
    """The file compressed although the client asked for identity, with the compressed Content-Length."""
    def answer(handler, data):
        body = gzip.compress(data + extra) if encoding == "gzip" else zlib.compress(data + extra)
        handler.send_response(200)
        handler.send_header("Content-Encoding", encoding)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return answer


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_with_its_compressed_length_arrives_decompressed_and_verified(hub, repos, tmp_path,
                                                                                       encoding):
    hub.body_for["vocab.json"] = compressed_body(encoding)
    folder = resolve_model("gpt2", tmp_path / "models")
    assert (folder / "vocab.json").read_bytes() == gpt2_files(repos)["vocab.json"]
    assert all(headers.get("Accept-Encoding") == "identity" for headers in hub.request_headers)


def test_a_compressed_body_that_inflates_past_the_announced_size_is_refused(hub, repos, tmp_path):
    hub.body_for["vocab.json"] = compressed_body("gzip", extra=bytes(10 << 20))  # 10 MB of zeros: 10 KB gzipped
    size = len(gpt2_files(repos)["vocab.json"])
    with pytest.raises(DownloadError, match=f"vocab.json sends more than the {size} bytes expected"):
        resolve_model("gpt2", tmp_path / "models")



@pytest.mark.parametrize("value", [10**5000, -(10**400), True, "two"], ids=["5000 digits", "minus 400 digits", "True", "two"])
def test_a_deadline_passed_from_python_that_is_no_number_of_seconds_is_a_value_error_naming_it(hub, tmp_path, value):
    """From Python a deadline can be an int too large for a float (OverflowError) or too long to print
    (Python refuses repr of an int of over 4,300 digits): still the one ValueError, quoting it cut short."""
    with pytest.raises(ValueError, match="deadline_seconds must be a number of seconds > 0") as raised:
        resolve_model("gpt2", tmp_path / "models", deadline_seconds=value)
    assert len(str(raised.value)) < 200
    assert hub.requests == []
