"""Models by their names: the names this project knows, the Hugging Face cache, and the Hugging Face Hub.

Read utils.py first (resolve_model turns a name into a folder with the functions here) and loaders/download.py
(download_file, which this file uses for every file of the Hub). The folder it returns is read by
loaders/hf_folder.py.

The Hub's cache layout (huggingface_hub's, shared with transformers), under $HF_HUB_CACHE, else $HF_HOME/hub,
else ~/.cache/huggingface/hub:
    models--openai-community--gpt2/
        refs/main                       the commit that "main" pointed at: 607a30d783dfa663caf39e06633721c8d4cfcd7e
        blobs/<etag>                    each file's bytes, named by its ETag (a sha256 for large files)
        snapshots/<commit>/config.json  -> ../../blobs/<etag>   (a relative symlink per file)
A file is downloaded as blobs/<etag>.part and renamed once complete (download.download_file), under the lock
blobs/<etag>.lock (download.download_lock): a second run downloading the same blob waits, then finds it there.
Read as huggingface_hub reads it, offline too: the repository folder or its blobs/ may be a link to a folder
(on another disk: kept, and written through), and a snapshot may hold plain files instead of links (the layout
huggingface_hub writes where links are not available, e.g. Windows without developer mode; so do we, there).

The cache is shared and the Hub (or a mirror in $HF_ENDPOINT) is another party, so nothing is taken on trust:
- a blob is used only if its bytes hash to its name (sha256 for large files, git's blob id for small ones),
  every time it is used; a damaged blob is deleted and downloaded again;
- the names that become paths (the commit, the ETags) are checked to be hexadecimal ids, and refs/main too;
- nothing is followed out of the repository's folder (but the two links huggingface_hub follows too, the
  folder itself and blobs/, which the user made): refs/ and snapshots/ must be real folders, a snapshot's
  links must point at ../../blobs/<etag>, and what we write replaces a link rather than writing through it;
- every file of one download comes from one commit (the first answer pins it), config.json first, so a
  repository that is not a GPT-2 this project can run is refused before its weights are fetched.
"""

import hashlib
import os
import re
import stat
import sys
import time
from pathlib import Path

from tqdm import tqdm

from loaders.download import (
    MODEL_SIZES,
    DeadlinePassed,
    DownloadError,
    check_url,
    download_deadline,
    download_file,
    download_lock,
    exchange,
    parse_size,
    size_cap,
    writing_into,
)
from loaders.hf_folder import read_hf_hparams
from loaders.safe_files import create_fresh_file, write_atomically
from loaders.weights import CheckpointError, read_json_file
from loaders.messages import shown

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
# owner/name as the Hub allows them: ASCII letters, digits, "_", "." and "-", at most 96 characters each, no "--" or
# ".." (two names must never map to one cache folder, models--owner--name).
REPO_ID = re.compile(r"(?!.*(--|\.\.))[A-Za-z0-9](?:[\w.-]{0,94}\w)?/[A-Za-z0-9](?:[\w.-]{0,94}\w)?", re.ASCII)


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
        raise ValueError(f"a model name must be text, like 124M or gpt2; got {shown(name)}")
    kind = local_path_kind(name)
    if kind == "folder" or name in MODEL_SIZES or hub_repo_id(name):
        return
    if kind == "file":
        raise ValueError(f"{name!r} is a file, not a folder: give the folder that holds the model's files")
    if kind is not None:  # the file system refused the name as a path
        raise ValueError(f"{shown(name)} is no model name, and no folder ({kind})")
    if looks_like_a_path(name):
        raise ValueError(f"there is no folder {shown(name, 200)} (seen from {os.getcwd()}): make it first, or give "
                         f"the folder that holds the model's files")
    raise ValueError(f"unknown model {shown(name, 200)}: use one of " + "; ".join(model_names_help()))


def looks_like_a_path(name):
    """True for a name only a folder could be (a path that starts at the root, the home folder or the current
    folder, or holds more than one separator), false for an owner/name of the Hub or a bare name.
    looks_like_a_path("/tmp/m") and looks_like_a_path("a/b/c"), not looks_like_a_path("openai-community/gpt2")."""
    return name.startswith(("/", "~", ".", "\\")) or (len(name) > 1 and name[1] == ":") or \
        name.replace("\\", "/").count("/") > 1


def local_path_kind(name):
    """What `name` is on this machine: "folder", "file", None (nothing), or why it cannot be a path at all (a
    name too long for the file system, a NUL byte): never an OSError."""
    try:
        mode = os.stat(name).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as error:
        return getattr(error, "strerror", None) or str(error)
    return "folder" if stat.S_ISDIR(mode) else "file"


# ------------------------------------------------------------------------------------------------------------
# The Hugging Face cache: where a repository's snapshot is, and whether it can be trusted
# ------------------------------------------------------------------------------------------------------------

COMMIT_ID = re.compile(r"[0-9a-f]{40}")  # a git commit: 40 lowercase hexadecimal digits
BLOB_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a git blob id (small files) or a sha256 (large files)
# Open for reading, never through a link, and without waiting for a writer if a pipe stands where a file belongs
READ_NO_LINK = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
CACHE_HELP = " (the Hugging Face cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)"


def hf_hub_cache():
    """The Hugging Face cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def check_hub_cache():
    """ValueError naming the variable unless the Hugging Face cache can be a folder: HF_HUB_CACHE=/etc/passwd (or
    a folder under a file) can never hold one, and said "File exists" only once a download began."""
    folder = hf_hub_cache()
    existing = next((path for path in (folder, *folder.parents) if os.path.lexists(path)), None)
    if existing is None or existing.is_dir():
        return
    variable = next((name for name in ("HF_HUB_CACHE", "HF_HOME") if os.environ.get(name)), None)
    where = f"${variable}={shown(os.environ[variable], 300)}" if variable else f"the Hugging Face cache {folder}"
    raise ValueError(f"{where}: {existing} is not a folder, so the Hugging Face cache cannot be there; point "
                     f"{variable or 'HF_HUB_CACHE'} at a folder (or unset it for ~/.cache/huggingface/hub)")


def hub_cache_folders(repo_id):
    """The cache folders a repository may be under: its canonical name, and the legacy one for the models the
    Hub once had without an owner ("gpt2" was renamed "openai-community/gpt2")."""
    names = [repo_id]
    legacy = {hub_id: short for short, (hub_id, _) in HUB_MODELS.items()}
    if repo_id in legacy:
        names.append(legacy[repo_id])
    return [hf_hub_cache() / ("models--" + name.replace("/", "--")) for name in names]


def is_real_folder(path):
    """path is a folder and not a link to one (a link could lead out of the cache)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def is_folder(path):
    """path is a folder, or a link to one: the repository folder and its blobs/, which huggingface_hub follows
    (a user moves a large cache to another disk with such a link)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def blob_matches_its_name(blob, progress=True):
    """Whether the bytes of `blob` (a regular file, not a link) hash to its name: the sha256 of a large file,
    or the id git gives a small file's contents, sha1(b"blob <size>\\0" + bytes), which is the Hub's ETag.
    Hashing reads every byte once, so it costs about what reading the file does."""
    name = blob.name
    try:
        with os.fdopen(os.open(blob, READ_NO_LINK), "rb") as file:
            status = os.fstat(file.fileno())
            if not stat.S_ISREG(status.st_mode):
                return False
            digest = hashlib.sha256() if len(name) == 64 else hashlib.sha1(b"blob %d\0" % status.st_size)
            with tqdm(desc=f"checking {name[:12]}", total=status.st_size, unit="B", unit_scale=True,
                      unit_divisor=1024, disable=not progress or status.st_size < 100e6) as bar:
                while chunk := file.read(1 << 20):
                    digest.update(chunk)
                    bar.update(len(chunk))
    except OSError:
        return False
    return digest.hexdigest() == name


def read_ref(folder):
    """The commit id in folder/refs/main, or None if there is none to trust: a missing file, a link (never
    followed), a folder, a file that is not one 40-digit hexadecimal id."""
    if not (is_folder(folder) and is_real_folder(folder / "refs")):
        return None
    try:
        with os.fdopen(os.open(folder / "refs" / "main", READ_NO_LINK), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None
            text = file.read(100).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if COMMIT_ID.fullmatch(text) else None


def linked_blob(folder, link):
    """The blob folder/blobs/<id> that the snapshot's `link` points at, or None unless it is exactly such a
    link (relative ../../blobs/<id> as huggingface_hub makes them, or absolute) to a regular file."""
    try:
        target = os.readlink(link)
    except (OSError, ValueError):
        return None  # missing, or not a link
    blob = Path(os.path.normpath(os.path.join(link.parent, target)))
    if blob.parent != folder / "blobs" or not BLOB_ID.fullmatch(blob.name) or not is_folder(blob.parent):
        return None
    try:
        return blob if stat.S_ISREG(os.lstat(blob).st_mode) else None
    except OSError:
        return None


def is_plain_file(path):
    """path is a regular file, not a link: a snapshot entry as huggingface_hub writes it where links are not
    available (it moves the blob into the snapshot). It has no blob name to check its bytes against: like
    huggingface_hub, we take it as it is (the readers still check every size and shape)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def cached_snapshot(repo_id):
    """The snapshot folder of repo_id's "main" in the Hugging Face cache, if every HUB_FILES is there and
    checks out (read_ref, linked_blob, blob_matches_its_name; or a plain file, is_plain_file), else None. A blob
    that does not hash to its name is deleted here, with a note on stderr, so the download that follows fetches
    it afresh."""
    for folder in hub_cache_folders(repo_id):
        commit = read_ref(folder)
        snapshot = folder / "snapshots" / str(commit)
        if commit is None or not (is_real_folder(folder / "snapshots") and is_real_folder(snapshot)):
            continue
        plain = [name for name in HUB_FILES if is_plain_file(snapshot / name)]
        blobs = [linked_blob(folder, snapshot / name) for name in HUB_FILES if name not in plain]
        if None in blobs or len(set(blobs)) < len(blobs):  # two files linked to one blob: one link is wrong
            continue
        damaged = [blob for blob in blobs if not blob_matches_its_name(blob)]
        for blob in damaged:
            print(f"{blob} is damaged (its bytes do not hash to its name): deleting it to download it again",
                  file=sys.stderr)
            with writing_into(blob.parent, CACHE_HELP):
                blob.unlink()
        if not damaged:
            return snapshot
    return None


def real_folder(path):
    """Make `path` (inside the cache) a real folder: a link or a file in its place is removed first, so that
    nothing is ever written through it to somewhere else."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    path.mkdir(exist_ok=True)
    return path


def folder_or_link_to_one(path):
    """Make `path` a folder, keeping a link to a folder there (the user's, to another disk: huggingface_hub
    writes through it too). A link to nothing (a disk not mounted?) or to a file is a DownloadError: it is the
    user's to mend, never deleted here."""
    if os.path.islink(path) and not is_folder(path):
        raise DownloadError(f"{path} is a link to {os.readlink(path)}, which is not a folder (a disk that is not "
                            f"mounted?): make it lead to a folder, or delete the link, and run again")
    return path if is_folder(path) else real_folder(path)


def replace_with_link(link, target):
    """Make `link` a symbolic link to `target`, replacing whatever link was there (dangling, looping, wrong)."""
    if os.path.islink(link) and os.readlink(link) == str(target):
        return
    if os.path.isdir(link) and not os.path.islink(link):
        raise DownloadError(f"{link} is a folder where a link to {target} belongs: delete it and run again")
    descriptor, temporary = create_fresh_file(link.parent, link.name)  # a fresh name, no other run's
    os.close(descriptor)
    os.unlink(temporary)
    try:
        os.symlink(target, temporary)
    except OSError:  # no links here (Windows without developer mode): huggingface_hub's layout then, is_plain_file
        os.replace(link.parent / target, link)  # the blob moves into the snapshot, as huggingface_hub moves it
        return
    os.replace(temporary, link)  # atomic, and replaces a link rather than following it


def write_ref(folder, commit):
    """Write `commit` into folder/refs/main through a new file renamed over it: a link there is replaced, never
    written through."""
    refs = real_folder(folder / "refs")
    ref = refs / "main"
    if os.path.isdir(ref) and not os.path.islink(ref):
        raise DownloadError(f"{ref} is a folder where a file holding the commit id belongs: delete it and run again")
    write_atomically(ref, commit)  # a new file renamed over it: nothing to follow


# ------------------------------------------------------------------------------------------------------------
# The Hub: downloading a snapshot into the cache
# ------------------------------------------------------------------------------------------------------------


def hub_snapshot(repo_id, retries=3, backoff_seconds=1.0, timeout_seconds=30.0, deadline_seconds=None):
    """repo_id's snapshot folder: from the Hugging Face cache if every file is there and checks out (no network
    at all), else downloaded from the Hub ($HF_ENDPOINT, default https://huggingface.co) into that cache, in its
    layout. The first answer pins the commit; the other files are asked for at that commit. A plain file already
    in the snapshot (huggingface_hub's layout without links) is kept, not downloaded again."""
    snapshot = cached_snapshot(repo_id)
    if snapshot is not None:
        return snapshot
    endpoint = check_url(os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT, "HF_ENDPOINT")
    folder = hub_cache_folders(repo_id)[0]
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):  # huggingface_hub's switch
        raise DownloadError(f"{repo_id} is not (completely) in the Hugging Face cache {hf_hub_cache()}, and "
                            f"HF_HUB_OFFLINE is set: unset it to download it from {endpoint}/{repo_id}")
    with writing_into(hf_hub_cache(), CACHE_HELP):
        hf_hub_cache().mkdir(parents=True, exist_ok=True)
        folder_or_link_to_one(folder)
        folder_or_link_to_one(folder / "blobs")
        real_folder(folder / "snapshots")
    commit = None
    for name in HUB_FILES:  # config.json first
        url = f"{endpoint}/{repo_id}/resolve/{commit or 'main'}/{name}"
        deadline = time.monotonic() + download_deadline(deadline_seconds)
        etag, file_commit, size = hub_file_metadata(url, folder, timeout_seconds, deadline)
        if commit is not None and file_commit != commit:
            raise DownloadError(f"{url} answered for commit {file_commit}, not the {commit} asked for: run again")
        commit = file_commit
        blob, entry = folder / "blobs" / etag, folder / "snapshots" / commit / name
        if not is_plain_file(entry):  # a plain file there is the user's (huggingface_hub's layout without links)
            fetch_blob(url, blob, size, size_cap(name), retries, backoff_seconds, timeout_seconds, deadline_seconds)
        if name == "config.json":  # first, so that a repository we cannot run fails before its big weights
            check_hub_config(repo_id, entry if is_plain_file(entry) else blob, url)
        with writing_into(folder, CACHE_HELP):
            snapshot = real_folder(folder / "snapshots" / commit)
            if not is_plain_file(entry):
                replace_with_link(snapshot / name, Path("..") / ".." / "blobs" / etag)
    with writing_into(folder, CACHE_HELP):
        write_ref(folder, commit)
    return folder / "snapshots" / commit


def fetch_blob(url, blob, size, max_bytes, retries, backoff_seconds, timeout_seconds, deadline_seconds):
    """Make `blob` (blobs/<id>) hold the bytes that hash to its name: kept if it already does, else downloaded
    (resuming blobs/<id>.part). A resumed download that does not hash right is fetched once more from scratch:
    the part left by an earlier run may hold bytes a crash never wrote."""
    if blob_matches_its_name(blob):
        return
    with writing_into(blob.parent, CACHE_HELP), download_lock(blob, deadline_seconds, url):
        if os.path.lexists(blob) and blob_matches_its_name(blob):  # put there by the run whose lock we waited for
            return
        if os.path.lexists(blob):
            os.unlink(blob)  # damaged, or a link: a blob is always a file of our own
        part = blob.with_name(blob.name + ".part")
        for resumed in (os.path.lexists(part), False):
            download_file(url, blob, retries, backoff_seconds, timeout_seconds, deadline_seconds, size=size,
                          max_bytes=max_bytes)
            if blob_matches_its_name(blob):
                return
            blob.unlink()
            if not resumed:
                break
    kind = "sha256" if len(blob.name) == 64 else "git blob id"
    raise DownloadError(f"{url} sent bytes whose {kind} is not its ETag {blob.name}: the server does not send what it "
                        f"announces (nothing was kept); run again, or set HF_ENDPOINT to another mirror")


def check_hub_config(repo_id, config_path, url=None):
    """DownloadError unless the config.json of repo_id describes a GPT-2 this project can run: model_type "gpt2",
    and the settings and sizes hf_folder.read_hf_hparams accepts (checked before the weights are fetched)."""
    where = url or config_path
    try:
        config = read_json_file(config_path, "GPT-2 config.json")
        model_type = config.get("model_type") if isinstance(config, dict) else None
        if not isinstance(config, dict):
            raise DownloadError(f"{repo_id}'s config.json ({where}) is not a JSON object")
        if model_type != "gpt2":
            raise DownloadError(f"{repo_id} is not a GPT-2 repository: its config.json says model_type "
                                f"{shown(model_type)}, and this project runs GPT-2 only (model_type 'gpt2')")
        read_hf_hparams(config_path)
    except CheckpointError as error:
        raise DownloadError(f"{repo_id}'s config.json ({where}) is refused: {error.problem or error}") from None


def hub_file_metadata(url, cache_folder, timeout_seconds, deadline=None):
    """(etag, commit, size) of a file on the Hub, from a HEAD request as huggingface_hub makes it: the ETag of
    the file (X-Linked-Etag for a large file stored elsewhere, whose answer is a redirect), X-Repo-Commit, and
    the size (X-Linked-Size, else Content-Length of a direct answer; None if neither). The ETag and the commit
    become names in the cache: each must be a hexadecimal id (BLOB_ID, COMMIT_ID). The exchange ends by
    `deadline` (a time.monotonic(); default: download.download_deadline() from now)."""
    deadline = time.monotonic() + download_deadline() if deadline is None else deadline
    try:
        with exchange("HEAD", url, deadline, timeout_seconds, allow_redirects=False,
                      headers={"Accept-Encoding": "identity"}) as response:
            pass
    except DeadlinePassed:
        raise DownloadError(f"{url} did not answer within the deadline of one file (raise it with "
                            f"--download_deadline or GPT2_DOWNLOAD_DEADLINE=seconds)") from None
    except OSError as error:  # what requests raises for a refused connection or a timeout is an OSError
        raise DownloadError(
            f"could not reach the Hugging Face Hub at {url} ({type(error).__name__}), and the model is not in the "
            f"Hugging Face cache {cache_folder}: connect to the internet once, or set HF_ENDPOINT to a mirror"
        ) from None
    if response.status_code == 404 and response.headers.get("X-Error-Code") == "EntryNotFound":
        head, _, name = url.partition("/resolve/")  # {endpoint}/{owner}/{name}/resolve/{revision}/{file}
        repo_id, name = "/".join(head.rsplit("/", 2)[-2:]), name.partition("/")[2]
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
    etag = etag.strip().removeprefix("W/").strip('"')
    if not BLOB_ID.fullmatch(etag) or not COMMIT_ID.fullmatch(commit.strip()):
        raise DownloadError(f"{url} sent an ETag or commit that is not a hexadecimal id (a sha256 or a git id): "
                            f"{shown(etag)}, {shown(commit)}")
    size = parse_size(response.headers.get("X-Linked-Size"), "X-Linked-Size", url)
    if size is None and not response.is_redirect:
        size = parse_size(response.headers.get("Content-Length"), "Content-Length", url)
    return etag, commit.strip(), size
