"""Download a file over HTTP into NAME.part, and rename it NAME once it is complete; OpenAI's release files.

Read utils.py first (resolve_model is the one place that understands a model's name and calls this file);
loaders/hub.py builds on `download_file` for the Hugging Face Hub.

A file is first written as NAME.part and renamed to NAME only once its size matches what the server
announced. So a file under its final name is always complete, and that is how we know to skip it on the
next run: no request needed. (A truncated file put there by hand is caught later by the checkpoint reader,
which compares every size with the index.) A leftover NAME.part is resumed with an HTTP Range request;
transient failures (a dropped connection, a 5xx answer, a body cut short) are retried with exponential
backoff, and anything else is one DownloadError naming the URL, the folder and what to do.

Every download is bounded, whatever the server does: it stops at the size the server announced (or the
cap of its kind of file, `size_cap`), and at an overall deadline per file (`download_deadline`) that covers the
whole exchange: connecting, the headers, redirects and the body (`exchange`: a watchdog closes the connection).

Two runs filling one folder at once take turns per file (safe_files.file_lock): the second waits for the first,
then finds the file there and does not download it again. A release file whose size is known beforehand
(`release_file_size`: the tokenizer's two files, and the weights once the index is in) or whose content is known
(hparams.json: HPARAMS) is checked before it gets its final name.
"""

import os
import re
import socket
import stat
import sys
import threading
import time
import urllib.parse
import zlib
from contextlib import contextmanager
from pathlib import Path

import requests
import urllib3  # requests' own HTTP library, installed with it: its errors, when reading raw
from tqdm import tqdm

from encoder import MAX_VOCABULARY_FILE_BYTES
from loaders.safe_files import CREATE_NEW, LockTimeout, file_lock, new_folders, remove_if_empty
from loaders.tf_checkpoint import MAX_INDEX_BYTES, read_checkpoint_index
from loaders.weights import MAX_CONFIG_BYTES, CheckpointError, check_hparams, read_json_file, read_openai_hparams
from loaders.weights import MODEL_SIZES  # noqa: F401 (its home since weights.py needs it; imported from here too)
from loaders.messages import os_error_text, shown

# The shapes of OpenAI's four released models (their hparams.json files): a download's hparams.json must match.
HPARAMS = {
    "124M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12},
    "355M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1024, "n_head": 16, "n_layer": 24},
    "774M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1280, "n_head": 20, "n_layer": 36},
    "1558M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1600, "n_head": 25, "n_layer": 48},
}

OPENAI_BASE_URL = "https://openaipublic.blob.core.windows.net/gpt-2/models"

# The files of one release, as OpenAI published them under {base_url}/{model_size}/.
RELEASE_FILES = (
    "checkpoint",
    "encoder.json",
    "hparams.json",
    "model.ckpt.data-00000-of-00001",
    "model.ckpt.index",
    "model.ckpt.meta",
    "vocab.bpe",
)

# The most bytes a file of each kind may have, when no size was announced or to refuse an absurd announced one.
# The readers refuse larger files too (weights.MAX_CONFIG_BYTES, encoder.MAX_VOCABULARY_FILE_BYTES,
# tf_checkpoint.MAX_INDEX_BYTES).
SMALL_FILE_CAPS = {
    "checkpoint": MAX_CONFIG_BYTES,
    "hparams.json": MAX_CONFIG_BYTES,
    "config.json": MAX_CONFIG_BYTES,
    "encoder.json": MAX_VOCABULARY_FILE_BYTES,
    "vocab.bpe": MAX_VOCABULARY_FILE_BYTES,
    "vocab.json": MAX_VOCABULARY_FILE_BYTES,
    "merges.txt": MAX_VOCABULARY_FILE_BYTES,
    "model.ckpt.index": MAX_INDEX_BYTES,
    "model.ckpt.meta": 64 << 20,  # the graph, never read: 1558M's is about 2 MB
}
MAX_WEIGHTS_BYTES = 64 << 30  # the weights: 1558M's are 6.2 GB; 64 GB keeps an endless body from filling a disk

# The sizes of the release files that are the same in all four releases (the tokenizer's): a file of another size
# is not OpenAI's, whatever the server announced.
TOKENIZER_FILE_SIZES = {"encoder.json": 1_042_301, "vocab.bpe": 456_318}

# The overall time one file may take, all attempts together, unless the caller or $GPT2_DOWNLOAD_DEADLINE says
# otherwise. A deadline never loses work: the NAME.part file stays, and the next run resumes it. So it only
# bounds how long one run can hang on a server that drips bytes; in one hour, 1558M's 6.2 GB need a
# connection of a few megabytes a second.
DEFAULT_DEADLINE_SECONDS = 3600.0
CHUNK_BYTES = 64 * 1024


def size_cap(filename):
    """The most bytes the file called `filename` may have (SMALL_FILE_CAPS, else MAX_WEIGHTS_BYTES)."""
    return SMALL_FILE_CAPS.get(filename, MAX_WEIGHTS_BYTES)


class DownloadError(RuntimeError):
    """A file could not be downloaded or stored; the message names the URL or the folder, and what to do."""


class _TransientError(Exception):
    """A failure worth retrying: a 5xx answer, or a body shorter than announced."""


class DeadlinePassed(Exception):
    """The overall deadline of a file passed; download_file and hub.hub_file_metadata say so, with the URL."""


# What requests raises for a dropped connection, a body cut short, or a server that does not answer in time.
_RETRYABLE_ERRORS = (
    _TransientError,
    requests.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.Timeout,
)


def download_deadline(deadline_seconds=None):
    """The overall deadline of one file in seconds: deadline_seconds, else $GPT2_DOWNLOAD_DEADLINE, else
    DEFAULT_DEADLINE_SECONDS. ValueError unless it is a number of seconds > 0."""
    where = "deadline_seconds"
    if deadline_seconds is None:
        deadline_seconds, where = os.environ.get("GPT2_DOWNLOAD_DEADLINE") or DEFAULT_DEADLINE_SECONDS, \
            "GPT2_DOWNLOAD_DEADLINE"
    try:
        seconds = float(deadline_seconds)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int too large for a float
        seconds = float("nan")
    if isinstance(deadline_seconds, bool) or not 0 < seconds < float("inf"):
        raise ValueError(f"{where} must be a number of seconds > 0; got {shown(deadline_seconds, 40)}")
    return seconds


def check_url(url, what):
    """ValueError unless `url` is an http:// or https:// URL (`what` names where it came from)."""
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
        raise ValueError(f"{what} must be an http:// or https:// URL; got {str(url)[:80]!r}")
    return url.rstrip("/")


def release_base_url(base_url=None):
    """Where OpenAI's release files come from: base_url, else $GPT2_BASE_URL, else OpenAI's bucket; a ValueError
    naming the one that is no http(s) URL (a mirror set in the environment is named as GPT2_BASE_URL)."""
    where = "base_url" if base_url else "GPT2_BASE_URL" if os.environ.get("GPT2_BASE_URL") else "OPENAI_BASE_URL"
    return check_url(base_url or os.environ.get("GPT2_BASE_URL") or OPENAI_BASE_URL, where)


@contextmanager
def writing_into(folder, hint=""):
    """Inside: an OSError (the folder is a file, lies under a file, is not writable, the disk is full) becomes
    one DownloadError naming the folder and the file."""
    try:
        yield
    except requests.RequestException:
        raise  # also an OSError, but the caller deals with it
    except IsADirectoryError as error:  # a folder where a file belongs: only its owner should delete a folder
        raise DownloadError(f"{error.filename} is a folder where a file belongs: delete it and run again") from None
    except OSError as error:
        raise DownloadError(f"cannot write into {folder}: {os_error_text(error)}{hint}") from None


@contextmanager
def download_lock(path, deadline_seconds=None, what=None):
    """Inside: this run alone downloads `path` (safe_files.file_lock on `path`.lock). Another run's lock is
    waited for at most the download deadline, then a DownloadError says whose it is and what to do. The lock is
    held for at most two deadlines and a minute (hub.fetch_blob may download a file twice), then it is stale."""
    seconds = download_deadline(deadline_seconds)
    try:
        with file_lock(path, hold_seconds=2 * seconds + 60, wait_seconds=seconds, what=what):
            yield
    except LockTimeout as error:
        raise DownloadError(str(error)) from None


def release_file_size(filename, model_dir):
    """The size the release file `filename` must have, if it is known before it is downloaded: the tokenizer's
    files (TOKENIZER_FILE_SIZES), and the weights once model.ckpt.index is in model_dir (where its last tensor
    ends); else None, and the size the server announces is the one checked."""
    if filename in TOKENIZER_FILE_SIZES:
        return TOKENIZER_FILE_SIZES[filename]
    if filename.startswith("model.ckpt.data"):
        try:
            _, entries = read_checkpoint_index(Path(model_dir) / "model.ckpt")
        except CheckpointError:
            return None  # the loader names the index and what is wrong with it
        return max((entry["offset"] + entry["size"] for entry in entries.values()), default=None)
    return None


def check_release_hparams(part_path, path, model_size, url):
    """CheckpointError for hparams out of range (weights.check_hparams, naming `path`), DownloadError unless
    they are those of OpenAI's `model_size` (HPARAMS): checked before the file gets its final name."""
    hparams = check_hparams(read_json_file(part_path, "readable JSON hparams file"), path)
    if model_size in HPARAMS and hparams != HPARAMS[model_size]:
        raise DownloadError(f"{url} is not OpenAI's hparams.json of {model_size}: it says {shown(hparams, 200)}, "
                            f"OpenAI's says {HPARAMS[model_size]}. Check the mirror (--base_url, GPT2_BASE_URL)")


def download_gpt2_files(model_size, model_dir, base_url=None, retries=5, backoff_seconds=1.0, timeout_seconds=30.0,
                        deadline_seconds=None):
    """Download the seven release files of `model_size` into `model_dir`, skipping those already there.

    The files come from {base_url}/{model_size}/{file}; base_url defaults to $GPT2_BASE_URL, else OpenAI's
    bucket. Retries wait backoff_seconds * 1, 2, 4, ... between attempts. Raises DownloadError when a file
    still fails after `retries` retries. The weights come last, after hparams.json and the index have been
    checked, so a release with absurd sizes is refused before its largest file is fetched. The size is not
    checked here: resolve_model is the one place that understands model names. Each missing file is downloaded
    under its lock (download_lock): a run that finds another downloading it waits, then finds it there. A
    complete folder is only read (it may be read-only).
    """
    base_url = release_base_url(base_url)
    model_dir = Path(model_dir)
    made = new_folders(model_dir)
    with writing_into(model_dir):
        model_dir.mkdir(parents=True, exist_ok=True)
    try:
        _download_release(model_size, model_dir, base_url, retries, backoff_seconds, timeout_seconds,
                          deadline_seconds)
    except BaseException:
        remove_if_empty(made)  # a download that failed before any byte arrived leaves no empty folder behind
        raise


def _download_release(model_size, model_dir, base_url, retries, backoff_seconds, timeout_seconds, deadline_seconds):
    """download_gpt2_files' work, into the folder it made: each missing file under its lock, hparams.json first
    (checked before the weights are asked for), the weights last."""
    for filename in sorted(RELEASE_FILES, key=lambda name: (name != "hparams.json", name.startswith("model.ckpt.data"))):
        path, url = model_dir / filename, f"{base_url}/{model_size}/{filename}"
        check = (lambda part, path=path, url=url: check_release_hparams(part, path, model_size, url)) \
            if filename == "hparams.json" else None
        if not path.is_file():  # a file under its final name was renamed there after its checks: complete
            with writing_into(model_dir), download_lock(path, deadline_seconds, url):
                if not path.is_file():  # unless another run put it there while we waited for its lock
                    download_file(url, path, retries, backoff_seconds, timeout_seconds, deadline_seconds,
                                  size=release_file_size(filename, model_dir), max_bytes=size_cap(filename),
                                  check=check)
        if filename == "hparams.json":
            read_openai_hparams(path)  # CheckpointError for absurd sizes, before the weights are downloaded


def download_file(url, path, retries=5, backoff_seconds=1.0, timeout_seconds=30.0, deadline_seconds=None,
                  size=None, max_bytes=None, check=None, by_hand=RELEASE_FILES):
    """Download `url` to `path` via `path`.part, resuming and retrying; rename only once complete.

    size: the file's size if known beforehand (the Hub announces it); max_bytes: the most it may have (default:
    size_cap of the file's name). The body is never read past either. check: a function of the complete part
    file that raises if its content is wrong (the part is then deleted). All attempts together end by the
    deadline (download_deadline(deadline_seconds)); the .part file stays for the next run to resume. The
    caller holds the file's lock (download_lock): the .part is this run's alone. by_hand: the files a failure
    says to download by hand into the folder instead (a release's, or a few of them).
    """
    path = Path(path)
    part_path = path.with_name(path.name + ".part")
    max_bytes = size_cap(path.name) if max_bytes is None else max_bytes
    if size is not None and size > max_bytes:
        raise DownloadError(f"{url} announces {size} bytes, more than the {max_bytes} a file {path.name} may have")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a whole number >= 0; got {str(retries)[:40]!r}")
    seconds = download_deadline(deadline_seconds)
    deadline = time.monotonic() + seconds
    last_error = None
    try:
        with writing_into(path.parent):
            for attempt in range(retries + 1):
                if attempt > 0:
                    wait = backoff_seconds * 2 ** (attempt - 1)  # exponential backoff: 1, 2, 4, ... x backoff
                    if time.monotonic() + wait > deadline:
                        raise DeadlinePassed()
                    print(f"{url}: {failure_text(url, last_error)}; trying again in {wait:g} s (retry {attempt} of "
                          f"{retries})", file=sys.stderr, flush=True)  # a wait offline says what it waits for
                    time.sleep(wait)
                try:
                    fetch_into_part_file(url, part_path, timeout_seconds, size if size is not None else max_bytes,
                                         deadline, by_hand)
                except _RETRYABLE_ERRORS as error:
                    last_error = error
                    continue
                got = part_path.stat().st_size
                if size is not None and got != size:
                    part_path.unlink()
                    raise DownloadError(f"{url} sent {got} bytes where {size} were announced or known: run again to "
                                        f"download it afresh")
                if check is not None:
                    try:
                        check(part_path)
                    except BaseException:
                        part_path.unlink()  # its bytes are wrong: resuming them would never help
                        raise
                part_path.replace(path)  # complete: give it its final name (replacing a link, never following it)
                return
    except DeadlinePassed:
        raise DownloadError(f"{url} took longer than the deadline of {seconds:g} seconds for one file (raise it "
                            f"with --download_deadline or GPT2_DOWNLOAD_DEADLINE=seconds); {part_path} is kept: run "
                            f"again to resume") from None
    attempts = f"{retries + 1} attempt{'s' if retries else ''} failed"
    raise _download_error(url, path.parent, f"{attempts}, the last with: {failure_text(url, last_error)}",
                          by_hand) from last_error


def no_connection(error):
    """Whether `error`, as requests raised it, is a connection that was never made: no network, a name that
    does not resolve, a connection refused or not answered. (A connection dropped halfway is not.)"""
    if isinstance(error, requests.ConnectTimeout):
        return True
    reason = getattr(error.args[0], "reason", None) if isinstance(error, requests.ConnectionError) and error.args \
        else None
    return isinstance(reason, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError))


def could_not_connect(error):
    """Whether a DownloadError comes from a server that could not be reached at all (no_connection), following
    the errors it was raised from or while handling: offline, nothing can be downloaded."""
    seen = set()
    while error is not None and id(error) not in seen:
        if no_connection(error):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def failure_text(url, error):
    """What went wrong, in a line: 'could not connect to 127.0.0.1:9 (Connection refused)' for a connection never
    made, else requests' own text of the error."""
    if not no_connection(error):
        return str(error)
    why = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(error))
    host = urllib.parse.urlsplit(url).netloc
    return f"could not connect to {host} ({why[1].strip() if why else type(error).__name__})"


def _download_error(url, folder, reason, by_hand=RELEASE_FILES):
    by_hand_url = url.rsplit("/", 1)[0]
    if "/resolve/" in url:  # a Hub file (loaders/hub.py): its blob's name must be the ETag, so no copy by hand
        return DownloadError(f"could not download {url} into {folder}: {reason}. Run again to resume (finished "
                             f"files are kept)")
    return DownloadError(
        f"could not download {url} into {folder}: {reason}. Run again to resume (finished files are kept), "
        f"or download the files by hand from {by_hand_url} into {folder} "
        f"(they are: {', '.join(by_hand)})"
    )


class _WatchedAdapter(requests.adapters.HTTPAdapter):
    """requests' HTTPAdapter, keeping every socket it connects (directly or through a proxy), so that a watchdog
    can close them all: `close_sockets` makes a read that waits on any of them fail at once."""

    def __init__(self):
        self.sockets = []
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self._watch(self.poolmanager)

    def proxy_manager_for(self, proxy, **kwargs):
        return self._watch(super().proxy_manager_for(proxy, **kwargs))

    def _watch(self, manager):
        sockets = self.sockets

        def watched(pool_class):
            class Connection(pool_class.ConnectionCls):
                def connect(self):
                    super().connect()
                    sockets.append(self.sock)

            return type(pool_class.__name__, (pool_class,), {"ConnectionCls": Connection})

        manager.pool_classes_by_scheme = {scheme: watched(pool) for scheme, pool in
                                          manager.pool_classes_by_scheme.items()}
        return manager

    def close_sockets(self):
        for sock in list(self.sockets):
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # wakes a thread waiting in recv (close does not)
            except OSError:
                pass  # closed already


@contextmanager
def exchange(method, url, deadline, timeout_seconds, **kwargs):
    """Inside: the answer to one request (http_request), the whole exchange (connecting, the headers, redirects,
    the body read inside) ending by `deadline` (a time.monotonic()), else DeadlinePassed.

    requests' timeouts bound each wait for the server, not their sum: a server that sends its headers one byte
    every half second never trips them. So a watchdog thread closes the connection when the deadline passes, and
    each wait is also at most the time left. (A name lookup that hangs is the one wait this cannot cut.)"""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlinePassed()
    adapter, session = _WatchedAdapter(), requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    watchdog = threading.Timer(remaining, adapter.close_sockets)
    watchdog.daemon = True
    watchdog.start()
    wait = min(timeout_seconds, remaining)
    try:
        with http_request(method, url, session=session, timeout=(wait, wait), **kwargs) as response:
            if time.monotonic() >= deadline:  # cut by the watchdog: the headers read so far may look complete
                raise DeadlinePassed()
            yield response
    except (*_RETRYABLE_ERRORS, urllib3.exceptions.HTTPError, OSError):
        if time.monotonic() >= deadline:
            raise DeadlinePassed() from None
        raise
    finally:
        watchdog.cancel()
        session.close()


def http_request(method, url, session=requests, **kwargs):
    """session.request (default: requests.request), with every requests error that asking again will not fix
    turned into one DownloadError naming the URL (a redirect loop, a redirect to file:// or ftp://, an invalid
    URL). Dropped connections and timeouts pass through, for the caller to retry."""
    try:
        return session.request(method, url, **kwargs)
    except _RETRYABLE_ERRORS:
        raise
    except requests.TooManyRedirects:
        raise DownloadError(f"{url} redirects in a loop (more than {requests.models.DEFAULT_REDIRECT_LIMIT} "
                            f"redirects)") from None
    except (requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema) as error:
        raise DownloadError(f"{url} leads to a URL that is not http:// or https://, which is never fetched "
                            f"({str(error)[:200]})") from None
    except (requests.RequestException, ValueError) as error:  # ValueError: a Location that is not UTF-8, ...
        raise DownloadError(f"{url} cannot be fetched ({type(error).__name__}: {str(error)[:200]})") from None


def parse_size(value, what, url):
    """A size header's value (Content-Length, X-Linked-Size) as an int, None if absent; DownloadError unless it
    is a whole number of at most 19 digits (a 5,000-digit one would be Python's digit-limit error)."""
    if value is None:
        return None
    if not re.fullmatch(r"[0-9]{1,19}", value.strip()):
        raise DownloadError(f"{url} sent a {what} header that is not a size in bytes: {value[:40]!r}")
    return int(value)


def resumable_size(part_path):
    """The size of the `part_path` an earlier run left, to resume; 0 if there is none. A link (to a file
    anywhere), a pipe or anything else that is not a regular file in its place is removed, never followed or
    appended to (removing a link leaves what it points at alone)."""
    try:
        status = os.lstat(part_path)
    except FileNotFoundError:
        return 0
    if stat.S_ISREG(status.st_mode):
        return status.st_size
    os.unlink(part_path)  # a folder raises IsADirectoryError: writing_into names it
    return 0


def fetch_into_part_file(url, part_path, timeout_seconds, max_bytes=MAX_WEIGHTS_BYTES, deadline=None,
                         by_hand=RELEASE_FILES):
    """One attempt: append the rest of `url` to `part_path` (or start it afresh); return once it is complete.

    We ask for the bytes as they are (Accept-Encoding: identity). A server that compresses anyway has its
    body decompressed here, its Content-Length counting the compressed bytes, and is never resumed (a range
    of compressed bytes is not a range of the file). Raises _TransientError (or a requests error) for anything
    worth retrying, DeadlinePassed, DownloadError otherwise.
    """
    have = resumable_size(part_path)
    if have > max_bytes:
        part_path.unlink()
        have = 0
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have > 0 else {})}
    deadline = time.monotonic() + DEFAULT_DEADLINE_SECONDS if deadline is None else deadline
    with exchange("GET", url, deadline, timeout_seconds, headers=headers, stream=True) as response:
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower() or "identity"
        if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
            raise DownloadError(f"{url} sent its body in the encoding {encoding[:40]!r}, which is not decoded here")
        length = parse_size(response.headers.get("Content-Length"), "Content-Length", url)
        if response.status_code == 416:  # "range not satisfiable": our partial file is no use, start over
            part_path.unlink()
            raise _TransientError(f"server refused to resume from byte {have}")
        if response.status_code >= 500 or response.status_code == 429:
            raise _TransientError(f"HTTP {response.status_code} {response.reason}")
        if response.status_code == 206:  # the server resumes: it sends bytes have.. of `total`
            start, total = parse_content_range(response.headers.get("Content-Range", ""))
            if start != have or encoding != "identity":
                part_path.unlink()
                raise _TransientError(f"asked to resume at byte {have}, server sent from byte {start} ({encoding})")
            mode = "ab"
        elif response.status_code == 200:  # the whole file (also when the server ignores our Range header)
            have, total, mode = 0, length if encoding == "identity" else None, "wb"
        else:
            raise _download_error(url, part_path.parent, f"HTTP {response.status_code} {response.reason}", by_hand)
        if total is not None and total > max_bytes:
            raise DownloadError(f"{url} announces {total} bytes where at most {max_bytes} are expected")
        received = write_body(response, part_path, mode, have, total, desc=url.rsplit("/", 1)[-1],
                              max_bytes=max_bytes, deadline=deadline, encoding=encoding, url=url)

    size = part_path.stat().st_size
    if encoding != "identity" and length is not None and received != length:
        part_path.unlink()  # a compressed body cut short cannot be resumed
        raise _TransientError(f"got {received} of {length} compressed bytes")
    if total is not None and size != total:
        if size > total:
            part_path.unlink()
        raise _TransientError(f"got {size} of {total} bytes")


def write_body(response, part_path, mode, have, total, desc=None, max_bytes=MAX_WEIGHTS_BYTES, deadline=None,
               encoding="identity", url=None):
    """Stream the response body into `part_path` with a progress bar (bytes, scaled units, rate) named desc;
    return the number of bytes received (before decompression).

    Reads whatever has arrived (read1), so the deadline is checked even when a server drips one byte at a
    time, and stops with a DownloadError, deleting the part, as soon as the file would pass max_bytes.
    """
    read = getattr(response.raw, "read1", response.raw.read)  # read1: urllib3 >= 2; read waits for a full chunk
    decoder = None if encoding == "identity" else Inflater(encoding)
    received, written = 0, have
    with open_part_file(part_path, mode) as file, tqdm(
        desc=desc or part_path.name.removesuffix(".part"),
        total=total,
        initial=have,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
    ) as progress:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise DeadlinePassed()
            try:
                raw = read(CHUNK_BYTES, decode_content=False)
            except (urllib3.exceptions.HTTPError, OSError) as error:  # a dropped connection, a read timeout
                raise _TransientError(f"the connection broke: {str(error)[:200]}") from None
            if not raw:
                break
            received += len(raw)
            try:
                data = decoder.inflate(raw, max_bytes - written) if decoder else raw
            except zlib.error as error:
                raise DownloadError(f"{url or desc} sent a {encoding} body that does not decompress ({error})") from None
            if written + len(data) > max_bytes:
                file.close()
                part_path.unlink()
                raise DownloadError(f"{url or desc} sends more than the {max_bytes} bytes expected; stopped there")
            file.write(data)
            written += len(data)
            progress.update(len(data))
    if decoder is not None and not decoder.eof:
        raise _TransientError(f"the {encoding} body ends before its end")
    return received


def open_part_file(part_path, mode):
    """The part file opened to append to ("ab": never through a link, never a pipe: a regular file it must be)
    or to start afresh ("wb": whatever is there removed, the file made anew by this call, O_EXCL)."""
    if mode == "ab":
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        file = os.fdopen(os.open(part_path, flags | getattr(os, "O_BINARY", 0)), "wb")
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            file.close()
            os.unlink(part_path)
            raise _TransientError(f"{part_path} is not a regular file: removed, to start afresh")
        return file
    resumable_size(part_path)  # a link or a pipe: removed
    if os.path.lexists(part_path):
        os.unlink(part_path)
    return os.fdopen(os.open(part_path, CREATE_NEW, 0o644), "wb")


class Inflater:
    """Decompress a body sent with Content-Encoding gzip or deflate. A gzip body may hold several members one
    after the other (RFC 1952, 2.2; `cat a.gz b.gz` is valid gzip): each is decompressed in turn, as gzip -d does.

    `eof` is true only at the end of a member: a body that stops inside one is cut short."""

    def __init__(self, encoding):
        self.wbits = 31 if "gzip" in encoding else 15  # 31: a gzip header and trailer; 15: zlib's (deflate)
        self.decoder = zlib.decompressobj(self.wbits)

    @property
    def eof(self):
        return self.decoder.eof

    def inflate(self, raw, room):
        """The bytes the compressed bytes `raw` decompress to, at most room + 1 of them (one more than room
        says the file is too large, without decompressing a bomb)."""
        pieces, size, data = [], 0, raw
        while data and size <= room:
            if self.decoder.eof:  # a member ended and more bytes follow: the next member
                if self.wbits != 31:
                    raise zlib.error("bytes follow the end of the deflate stream")
                self.decoder = zlib.decompressobj(self.wbits)
            piece = self.decoder.decompress(data, room + 1 - size)
            pieces.append(piece)
            size += len(piece)
            data = self.decoder.unused_data if self.decoder.eof else b""
        return b"".join(pieces)


def parse_content_range(content_range):
    """'bytes 100-999/1000' -> (100, 1000): where the sent bytes start, and the size of the whole file."""
    match = re.fullmatch(r"bytes ([0-9]{1,19})-[0-9]{1,19}/([0-9]{1,19})", content_range.strip())
    if match is None:
        raise _TransientError(f"unreadable Content-Range header {content_range[:60]!r}")
    return int(match.group(1)), int(match.group(2))
