"""How an error message quotes what it refuses: a value cut to a readable length, an OSError as one line.

Every one-line `error: ...` of the project quotes the bad value with `shown` (never a megabyte of it) and a
file that could not be read or written with `os_error_text` (its name, what went wrong, and what to do when
the disk is full). Nothing here is about GPT-2; loaders/weights.py, the command line and the tools use it.
"""

import errno


def shown(value, width=60):
    """repr(value), cut to about `width` characters: a message quotes what it refuses without printing a
    megabyte of it. (An int of more than 4,300 digits has no repr at all: Python refuses to convert it.)"""
    try:
        text = repr(value)
    except ValueError:
        return f"a number of about {value.bit_length() * 30103 // 100000} digits"
    return text if len(text) <= width else text[: width - 3] + "..."


def printable(text, width=200):
    """`text` safe to print, to write into a CSV or a file, cut to about `width` characters: a character that is
    not printable (a terminal's escape code, a newline, a lone surrogate from a name in another encoding) is
    written as its escape, as repr writes it. printable("bob\x1b[2J") == "bob\\x1b[2J"."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text)[: 4 * width])
    return text if len(text) <= width else text[: width - 3] + "..."


def os_error_text(error, unnamed="a file"):
    """One line for an OSError: the file it names (or `unnamed`) and what went wrong, with what to do when the disk
    is full: 'models/124M/encoder.json: the disk is full or the file is larger than allowed (No space left on
    device): free some space and run again'. EFBIG (a file past the size the system allows, as a full disk or
    a quota shows itself to some) and EDQUOT (a quota) say the same."""
    where = error.filename if error.filename is not None else unnamed
    reason = error.strerror or str(error) or type(error).__name__
    if error.errno in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return f"{where}: the disk is full or the file is larger than allowed ({reason}): free some space and run again"
    return f"{where}: {reason}"
