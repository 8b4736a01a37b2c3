"""Models by their names: the names this project knows, the Hugging Face cache, and the Hugging Face Hub.

Read utils.py first (resolve_model turns a name into a folder with the functions here) and download.py
(download_file, which this file uses for every file of the Hub). The folder it returns is read by
hf_folder.py.

The Hub's cache layout (huggingface_hub's, shared with transformers), under $HF_HUB_CACHE, else $HF_HOME/hub,
else ~/.cache/huggingface/hub:
    models--openai-community--gpt2/
        refs/main                       the commit that "main" pointed at: 607a30d783dfa663caf39e06633721c8d4cfcd7e
        blobs/<etag>                    each file's bytes, named by its ETag (a sha256 for large files)
        snapshots/<commit>/config.json  -> ../../blobs/<etag>   (a relative symlink per file)
A file is downloaded as blobs/<etag>.part and renamed once complete (download.download_file).
"""

import json
import os
import re
from pathlib import Path

import requests

from download import MODEL_SIZES, DownloadError, download_file

# name -> (its Hub id, the OpenAI release it matches, or None)
HUB_MODELS = {
    "gpt2": ("openai-community/gpt2", "124M"),
    "gpt2-medium": ("openai-community/gpt2-medium", "355M"),
    "gpt2-large": ("openai-community/gpt2-large", "774M"),
    "gpt2-xl": ("openai-community/gpt2-xl", "1558M"),
    "distilgpt2": ("distilbert/distilgpt2", None),
}
DISTILGPT2_HPARAMS = {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 6}
HUB_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt")
HUB_ENDPOINT = "https://huggingface.co"
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # owner/name


def model_names_help():
    """The names a model flag takes, one line each, for --help and error messages."""
    lines = [f"{size} (OpenAI's release files)" for size in MODEL_SIZES]
    for name, (repo_id, size) in HUB_MODELS.items():
        lines.append(f"{name} or {repo_id} (Hugging Face" + (f"; the same weights as {size})" if size else ")"))
    lines.append("any owner/name of a GPT-2 repository on the Hub with config.json and model.safetensors")
    lines.append("a local folder in OpenAI's or Hugging Face's layout")
    return lines


def hub_repo_id(name):
    """The Hub id for a name: hub_repo_id("gpt2") == "openai-community/gpt2"; an owner/name stays as it is."""
    if name in HUB_MODELS:
        return HUB_MODELS[name][0]
    return name if isinstance(name, str) and REPO_ID.fullmatch(name) else None


def check_model_name(name):
    """ValueError naming `name` and the known names unless it is a model name resolve_model understands.
    No network: an owner/name passes here and may still turn out not to exist on the Hub."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model name must be text, like 124M or gpt2; got {name!r}")
    if Path(name).is_dir() or name in MODEL_SIZES or hub_repo_id(name):
        return
    if Path(name).exists():
        raise ValueError(f"{name!r} is a file, not a folder: give the folder that holds the model's files")
    raise ValueError(f"unknown model {name!r}: use one of " + "; ".join(model_names_help()))


def hf_hub_cache():
    """The Hugging Face cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def hub_cache_folders(repo_id):
    """The cache folders a repository may be under: its canonical name, and the legacy one for the models the
    Hub once had without an owner ("gpt2" was renamed "openai-community/gpt2")."""
    names = [repo_id]
    legacy = {hub_id: short for short, (hub_id, _) in HUB_MODELS.items()}
    if repo_id in legacy:
        names.append(legacy[repo_id])
    return [hf_hub_cache() / ("models--" + name.replace("/", "--")) for name in names]


def cached_snapshot(repo_id):
    """The snapshot folder of repo_id's "main" in the Hugging Face cache that holds every HUB_FILES, or None."""
    for folder in hub_cache_folders(repo_id):
        ref = folder / "refs" / "main"
        if ref.is_file():
            snapshot = folder / "snapshots" / ref.read_text().strip()
            if all((snapshot / name).is_file() for name in HUB_FILES):  # is_file follows the symlinks
                return snapshot
    return None


def hub_snapshot(repo_id, retries=3, backoff_seconds=1.0, timeout_seconds=30.0):
    """repo_id's snapshot folder: from the Hugging Face cache if every file is there (no network at all), else
    downloaded from the Hub ($HF_ENDPOINT, default https://huggingface.co) into that cache, in its layout."""
    snapshot = cached_snapshot(repo_id)
    if snapshot is not None:
        return snapshot
    endpoint = (os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT).rstrip("/")
    folder = hub_cache_folders(repo_id)[0]
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):  # huggingface_hub's switch
        raise DownloadError(f"{repo_id} is not (completely) in the Hugging Face cache {hf_hub_cache()}, and "
                            f"HF_HUB_OFFLINE is set: unset it to download it from {endpoint}/{repo_id}")
    commit = None
    for name in HUB_FILES:
        url = f"{endpoint}/{repo_id}/resolve/main/{name}"
        etag, file_commit, size = hub_file_metadata(url, folder, timeout_seconds)
        commit = commit or file_commit
        blob = folder / "blobs" / etag
        if not blob.is_file():  # a blob under its final name is complete (download.py)
            blob.parent.mkdir(parents=True, exist_ok=True)
            download_file(url, blob, retries, backoff_seconds, timeout_seconds)
            if size is not None and blob.stat().st_size != size:  # the size the Hub announced (X-Linked-Size)
                got = blob.stat().st_size
                blob.unlink()
                raise DownloadError(f"{url} sent {got} bytes where the Hub announced {size}: run again to download "
                                    f"it afresh")
        if name == "config.json":  # first, so that a repository of another kind fails before its big weights
            check_hub_config(repo_id, blob)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(Path("..") / ".." / "blobs" / etag)  # relative, as huggingface_hub makes them
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return folder / "snapshots" / commit


def check_hub_config(repo_id, config_path):
    """DownloadError unless the config.json of repo_id is readable and says model_type "gpt2" (the loader checks
    the rest of it)."""
    try:
        model_type = json.loads(Path(config_path).read_text(encoding="utf-8")).get("model_type")
    except (ValueError, AttributeError):
        raise DownloadError(f"{repo_id}'s config.json ({config_path}) is not a JSON object") from None
    if model_type != "gpt2":
        raise DownloadError(f"{repo_id} is not a GPT-2 repository: its config.json says model_type {model_type!r}, "
                            f"and this project runs GPT-2 only (model_type 'gpt2')")


def hub_file_metadata(url, cache_folder, timeout_seconds):
    """(etag, commit, size) of a file on the Hub, from a HEAD request as huggingface_hub makes it: the ETag of
    the file (X-Linked-Etag for a large file stored elsewhere, whose answer is a redirect), X-Repo-Commit, and
    the size (X-Linked-Size, else Content-Length of a direct answer; None if neither)."""
    try:
        response = requests.head(url, allow_redirects=False, timeout=timeout_seconds,
                                 headers={"Accept-Encoding": "identity"})
    except requests.RequestException as error:
        raise DownloadError(
            f"could not reach the Hugging Face Hub at {url} ({type(error).__name__}), and the model is not in the "
            f"Hugging Face cache {cache_folder}: connect to the internet once, or set HF_ENDPOINT to a mirror"
        ) from None
    if response.status_code == 404 and response.headers.get("X-Error-Code") == "EntryNotFound":
        head, _, name = url.partition("/resolve/main/")  # {endpoint}/{owner}/{name}/resolve/main/{file}
        repo_id = "/".join(head.rsplit("/", 2)[-2:])
        raise DownloadError(f"{repo_id} has no {name} on the Hub ({url} answered HTTP 404): this project reads a "
                            f"GPT-2 repository with {', '.join(HUB_FILES)}")
    if response.status_code in (401, 404):
        raise DownloadError(f"{url} answered HTTP {response.status_code}: the repository or its file does not "
                            f"exist (or is private). A GPT-2 repository needs {', '.join(HUB_FILES)}")
    if response.status_code >= 400:
        raise DownloadError(f"{url} answered HTTP {response.status_code} {response.reason}")
    etag = response.headers.get("X-Linked-Etag") or response.headers.get("ETag")
    commit = response.headers.get("X-Repo-Commit")
    if not etag or not commit:
        raise DownloadError(f"{url} did not answer like the Hugging Face Hub (no ETag or X-Repo-Commit header)")
    etag = etag.removeprefix("W/").strip('"')
    if not re.fullmatch(r"[\w.-]+", etag) or not re.fullmatch(r"[\w.-]+", commit):
        raise DownloadError(f"{url} sent an ETag or commit that cannot name a file: {etag!r}, {commit!r}")
    size = response.headers.get("X-Linked-Size") or (None if response.is_redirect else
                                                       response.headers.get("Content-Length"))
    return etag, commit, int(size) if size and size.isdigit() else None
