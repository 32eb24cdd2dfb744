"""What ITK's C++ code writes to standard error, caught so that an error message can quote it in
one line (:func:`_native_stderr_captured`, :func:`_first_line`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

__all__ = ["_native_stderr_captured", "_first_line"]


@contextlib.contextmanager
def _native_stderr_captured() -> Iterator[list[str]]:
    """Capture what ITK's C++ code writes to file descriptor 2 (it bypasses Python's stderr).

    The captured text is appended to the yielded list, so error messages can quote it instead
    of leaving ITK's multi-line output on the user's terminal.
    """
    sink: list[str] = []
    try:
        fd = 2
        saved = os.dup(fd)
    except OSError:  # no real stderr (embedded use): nothing to capture
        yield sink
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield sink
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", "replace").strip())


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Exception thrown", "/", "sitk::ERROR")):
            return line
    return text.strip().splitlines()[-1] if text.strip() else ""
