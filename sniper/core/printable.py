"""Text as a terminal or a log shows it: the one place data (names, reasons, errors) is made printable.

Names and reasons are data from the feed and may hold control characters (ESC, BEL, a carriage return)
or invisible format characters; shown raw they would drive the reader's terminal. :func:`printable`
replaces every character Python does not call printable with its escape (``\\x1b``, ``\\u202e``);
printable text comes back unchanged. Pure functions, no I/O.
"""

from __future__ import annotations


def _escaped(char: str) -> str:
    return char if char.isprintable() else char.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """``text`` with each non-printable character (control, format, separator other than a space)
    written as its backslash escape: ``"a\\x1b[2Jb"`` reads ``a\\x1b[2Jb`` on a screen, never clears it."""
    if text.isprintable():
        return text
    return "".join(map(_escaped, text))
