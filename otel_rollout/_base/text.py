"""Text as any stream can take it: what cannot be encoded is written as an escape.

Ids and env classes come from users' data: a lone surrogate (a byte string decoded with
``surrogateescape``, a JSON ``"\\ud800"``) or a character a C-locale stream cannot encode
would otherwise raise ``UnicodeEncodeError`` in a table, the console tree or the
shutdown summary.
"""

from __future__ import annotations

import contextlib
from typing import Any


def printable(text: str, encoding: str | None = "utf-8") -> str:
    """``text``, with each character ``encoding`` cannot take written as a backslash
    escape (``\\ud800``); unchanged (the same object) when it encodes as it is."""
    enc = encoding or "utf-8"
    try:
        text.encode(enc)
    except UnicodeEncodeError:
        return text.encode(enc, "backslashreplace").decode(enc)
    except LookupError:  # an encoding Python does not know: UTF-8 at least is safe
        return printable(text, "utf-8")
    return text


def printable_for(stream: Any, text: str) -> str:
    """:func:`printable` for what ``stream`` (a text stream) encodes to."""
    return printable(text, getattr(stream, "encoding", None))


def escape_stream_errors(stream: Any) -> None:
    """Make a text stream (``sys.stdout`` of the CLI) escape what it cannot encode instead
    of raising; a stream that cannot be reconfigured is left as it is."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and getattr(stream, "errors", "strict") == "strict":
        with contextlib.suppress(ValueError, OSError, TypeError):
            reconfigure(errors="backslashreplace")


def mid(text: str, n: int) -> str:
    """An id shortened to ``n`` characters in its middle, so its start and its index (the
    end: ``gsm8k_multi_turn-45`` -> ``gsm8k_m…turn-45``) stay."""
    if len(text) <= n:
        return text
    tail = (n - 1) // 2
    return text[: n - 1 - tail] + "…" + text[len(text) - tail :]
