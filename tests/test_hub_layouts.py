"""Every Hugging Face cache layout huggingface_hub reads offline is read here too, and what the user put there is
never deleted or replaced: snapshot entries that are plain files (huggingface_hub's layout where links are not
available, e.g. Windows without developer mode), a repository folder that is a link to another disk, a blobs/
that is a link.

Read loaders/hub.py first (is_folder, is_plain_file, folder_or_link_to_one): these tests are its specification. Each
cache is written by huggingface_hub itself from tests/test_hub_cache.py's FakeHub, then laid out as a user
would; huggingface_hub, offline, is the peer that says the layout is readable. No network.
"""

import os
import shutil

import pytest
import test_hub_cache
from test_hostile_hub import gpt2_files, repo_folder

from loaders.download import DownloadError
from loaders.hub import HUB_FILES
from utils import load_model, resolve_model

huggingface_hub = pytest.importorskip("huggingface_hub")
hub, repos = test_hub_cache.hub, test_hub_cache.repos  # the fixtures: the fake Hub, and the repositories it serves


def plain_files(folder):
    """huggingface_hub's layout without links: it moves each blob into the snapshot, under the file's name."""
    for entry in (folder / "snapshots").glob("*/*"):
        blob = entry.resolve()
        entry.unlink()
        shutil.move(blob, entry)


def linked(folder, tmp_path, sub):
    """folder/sub (or the folder itself) moved to another "disk", with a link left in its place."""
    place = folder / sub if sub else folder
    elsewhere = tmp_path / "other-disk" / place.name
    elsewhere.parent.mkdir(exist_ok=True)
    shutil.move(place, elsewhere)
    place.symlink_to(elsewhere, target_is_directory=True)
    return place, elsewhere


LAYOUTS = ["plain_files", "repository_folder_linked", "blobs_linked"]


def lay_out(layout, tmp_path):
    """A cache of gpt2 written by huggingface_hub, in `layout`; (the link the user made, or None)."""
    test_hub_cache.download_with_huggingface_hub("openai-community/gpt2", os.environ["HF_ENDPOINT"],
                                                 tmp_path / "hf-cache")
    folder = repo_folder(tmp_path)
    if layout == "plain_files":
        plain_files(folder)
        return None
    return linked(folder, tmp_path, "blobs" if layout == "blobs_linked" else "")[0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_layout_huggingface_hub_reads_offline_is_read_offline(hub, repos, tmp_path, monkeypatch, layout):
    lay_out(layout, tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in HUB_FILES:  # the peer reads it
        path = huggingface_hub.hf_hub_download("openai-community/gpt2", name, cache_dir=tmp_path / "hf-cache")
        with open(path, "rb") as file:
            assert file.read() == gpt2_files(repos)[name]
    hub.requests.clear()

    encoder, hparams, _ = load_model(resolve_model("gpt2", tmp_path / "models"))

    assert encoder.encode("Hello world") == [15496, 995] and hub.requests == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_online_nothing_is_downloaded_again_and_the_users_layout_stays(hub, repos, tmp_path, layout):
    """Before, every file was downloaded again, and the user's link was deleted."""
    link = lay_out(layout, tmp_path)
    before = {path: os.path.islink(path) for path in sorted(repo_folder(tmp_path).rglob("*"))}
    hub.requests.clear()

    snapshot = resolve_model("gpt2", tmp_path / "models")

    assert hub.requests == []
    assert {path: os.path.islink(path) for path in sorted(repo_folder(tmp_path).rglob("*"))} == before
    assert link is None or link.is_symlink()
    assert all((snapshot / name).read_bytes() == gpt2_files(repos)[name] for name in HUB_FILES)


@pytest.mark.parametrize("layout", ["repository_folder_linked", "blobs_linked"])
def test_a_file_missing_behind_a_linked_folder_is_downloaded_through_the_link_which_stays(hub, repos, tmp_path,
                                                                                          layout):
    """The user moved the cache to another disk: a blob downloaded now goes there, as huggingface_hub's would."""
    link = lay_out(layout, tmp_path)
    blob = (repo_folder(tmp_path) / "snapshots" / test_hub_cache.COMMIT / "merges.txt").resolve()
    blob.unlink()

    snapshot = resolve_model("gpt2", tmp_path / "models")

    assert link.is_symlink() and (snapshot / "merges.txt").read_bytes() == gpt2_files(repos)["merges.txt"]
    assert blob.is_file() and str(tmp_path / "other-disk") in str(blob)


def test_a_linked_folder_whose_disk_is_gone_is_one_error_and_the_link_stays(hub, tmp_path):
    """A link to nothing (a disk not mounted): the user's to mend; it is neither deleted nor replaced."""
    link = lay_out("blobs_linked", tmp_path)
    shutil.rmtree(tmp_path / "other-disk")
    with pytest.raises(DownloadError, match=f"{link} is a link to .*, which is not a folder .*not mounted"):
        resolve_model("gpt2", tmp_path / "models")
    assert link.is_symlink()


def test_where_links_cannot_be_made_the_snapshot_holds_plain_files_as_huggingface_hub_makes_it(hub, repos, tmp_path,
                                                                                                monkeypatch):
    """Windows without developer mode refuses links: the blob is moved into the snapshot, and that cache is read
    again without a request, by this project and by huggingface_hub."""
    def no_links(*args, **kwargs):
        raise OSError(1314, "A required privilege is not held by the client")

    with monkeypatch.context() as patch:
        patch.setattr(os, "symlink", no_links)
        snapshot = resolve_model("gpt2", tmp_path / "models")
    assert all(os.path.isfile(snapshot / name) and not os.path.islink(snapshot / name) for name in HUB_FILES)
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model("gpt2", tmp_path / "models") == snapshot and hub.requests == []
    for name in HUB_FILES:
        path = huggingface_hub.hf_hub_download("openai-community/gpt2", name, cache_dir=tmp_path / "hf-cache")
        with open(path, "rb") as file:
            assert file.read() == gpt2_files(repos)[name]
