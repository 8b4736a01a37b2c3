"""Download a file over HTTP into NAME.part, and rename it NAME once it is complete; OpenAI's release files.

Read utils.py first (resolve_model is the one place that understands a model's name and calls this file);
hub.py builds on `download_file` for the Hugging Face Hub.

A file is first written as NAME.part and renamed to NAME only once its size matches what the server
announced. So a file under its final name is always complete, and that is how we know to skip it on the
next run: no request needed. (A truncated file put there by hand is caught later by the checkpoint reader,
which compares every size with the index.) A leftover NAME.part is resumed with an HTTP Range request;
transient failures (a dropped connection, a 5xx answer, a body cut short) are retried with exponential
backoff, and anything else is one DownloadError naming the URL, the folder and what to do.
"""

import os
import re
import time
from pathlib import Path

import requests
from tqdm import tqdm

MODEL_SIZES = ("124M", "355M", "774M", "1558M")

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


class DownloadError(RuntimeError):
    """A release file could not be downloaded; the message names the URL, the folder, and what to do."""

class _TransientError(Exception):
    """A failure worth retrying: a 5xx answer, or a body shorter than announced."""


# What requests raises for a dropped connection, a body cut short, or a server that does not answer in time.
_RETRYABLE_ERRORS = (
    _TransientError,
    requests.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.Timeout,
)


def download_gpt2_files(model_size, model_dir, base_url=None, retries=5, backoff_seconds=1.0, timeout_seconds=30.0):
    """Download the seven release files of `model_size` into `model_dir`, skipping those already there.

    The files come from {base_url}/{model_size}/{file}; base_url defaults to $GPT2_BASE_URL, else OpenAI's
    bucket. Retries wait backoff_seconds * 1, 2, 4, ... between attempts. Raises DownloadError when a file
    still fails after `retries` retries. The size is not checked here: resolve_model is the one place that
    understands model names.
    """
    base_url = (base_url or os.environ.get("GPT2_BASE_URL") or OPENAI_BASE_URL).rstrip("/")
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for filename in RELEASE_FILES:
        path = model_dir / filename
        if path.exists():  # only ever created by a rename after a size check: complete
            continue
        download_file(f"{base_url}/{model_size}/{filename}", path, retries, backoff_seconds, timeout_seconds)


def download_file(url, path, retries=5, backoff_seconds=1.0, timeout_seconds=30.0):
    """Download `url` to `path` via `path`.part, resuming and retrying; rename only once complete."""
    path = Path(path)
    part_path = path.with_name(path.name + ".part")
    last_error = None
    for attempt in range(retries + 1):
        if attempt > 0:
            time.sleep(backoff_seconds * 2 ** (attempt - 1))  # exponential backoff: 1, 2, 4, ... x backoff
        try:
            fetch_into_part_file(url, part_path, timeout_seconds)
        except _RETRYABLE_ERRORS as error:
            last_error = error
            continue
        part_path.replace(path)  # complete: give it its final name
        return
    raise _download_error(url, path.parent, f"{retries + 1} attempts failed, the last with: {last_error}")


def _download_error(url, folder, reason):
    by_hand_url = url.rsplit("/", 1)[0]
    if "/resolve/main/" in url:  # a Hub file (hub.py): its blob's name must be the ETag, so no copy by hand
        return DownloadError(f"could not download {url} into {folder}: {reason}. Run again to resume (finished "
                             f"files are kept)")
    return DownloadError(
        f"could not download {url} into {folder}: {reason}. Run again to resume (finished files are kept), "
        f"or download the files by hand from {by_hand_url} into {folder} "
        f"(they are: {', '.join(RELEASE_FILES)})"
    )


def fetch_into_part_file(url, part_path, timeout_seconds):
    """One attempt: append the rest of `url` to `part_path` (or start it afresh); return once it is complete.

    Raises _TransientError (or a requests error) for anything worth retrying, DownloadError otherwise.
    """
    have = part_path.stat().st_size if part_path.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have > 0 else {}
    with requests.get(url, headers=headers, stream=True, timeout=timeout_seconds) as response:
        if response.status_code == 416:  # "range not satisfiable": our partial file is no use, start over
            part_path.unlink()
            raise _TransientError(f"server refused to resume from byte {have}")
        if response.status_code >= 500 or response.status_code == 429:
            raise _TransientError(f"HTTP {response.status_code} {response.reason}")
        if response.status_code == 206:  # the server resumes: it sends bytes have.. of `total`
            start, total = parse_content_range(response.headers.get("Content-Range", ""))
            if start != have:
                part_path.unlink()
                raise _TransientError(f"asked to resume at byte {have}, server sent from byte {start}")
            mode = "ab"
        elif response.status_code == 200:  # the whole file (also when the server ignores our Range header)
            have = 0
            total = int(response.headers["Content-Length"]) if "Content-Length" in response.headers else None
            mode = "wb"
        else:
            raise _download_error(url, part_path.parent, f"HTTP {response.status_code} {response.reason}")
        write_body(response, part_path, mode, have, total, desc=url.rsplit("/", 1)[-1])

    size = part_path.stat().st_size
    if total is not None and size != total:
        if size > total:
            part_path.unlink()
        raise _TransientError(f"got {size} of {total} bytes")


def write_body(response, part_path, mode, have, total, desc=None):
    """Stream the response body into `part_path` with a progress bar (bytes, scaled units, rate) named desc."""
    with open(part_path, mode) as file, tqdm(
        desc=desc or part_path.name.removesuffix(".part"),
        total=total,
        initial=have,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
    ) as progress:
        for chunk in response.iter_content(chunk_size=64 * 1024):
            file.write(chunk)
            progress.update(len(chunk))


def parse_content_range(content_range):
    """'bytes 100-999/1000' -> (100, 1000): where the sent bytes start, and the size of the whole file."""
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", content_range.strip())
    if match is None:
        raise _TransientError(f"unreadable Content-Range header {content_range!r}")
    return int(match.group(1)), int(match.group(2))
