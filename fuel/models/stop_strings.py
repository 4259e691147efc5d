"""Stop strings for streamed text: the text before the first stop string is let through piece by
piece, holding back only what could still turn out to be the start of one."""

from __future__ import annotations

from collections.abc import Sequence

from fuel.ir.errors import InvalidArgument

MAX_STOP_STRINGS = 16


def check_stop_strings(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings (a single string is one stop string)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise InvalidArgument(f"stop must be a string or a list of strings, got {stop!r}")
    if len(stop) > MAX_STOP_STRINGS:
        raise InvalidArgument(f"at most {MAX_STOP_STRINGS} stop strings, got {len(stop)}")
    if any(not s for s in stop):
        raise InvalidArgument("a stop string must not be empty")
    return tuple(stop)


class StopStringFilter:
    """Feed it text pieces; it returns what may be shown and sets ``stopped`` once a stop
    string appears (the stop string and anything after it are never returned)."""

    def __init__(self, stop: str | Sequence[str] | None) -> None:
        self.stop = check_stop_strings(stop)
        self.stopped = False
        self._pending = ""

    def push(self, piece: str) -> str:
        """Add a piece; return the text now known to come before any stop string."""
        if self.stopped:
            return ""
        if not self.stop:
            return piece
        text = self._pending + piece
        found = [index for index in (text.find(s) for s in self.stop) if index >= 0]
        if found:
            self.stopped = True
            self._pending = ""
            return text[:min(found)]
        hold = 0
        for s in self.stop:  # the longest tail of text that starts some stop string
            for length in range(min(len(s) - 1, len(text)), hold, -1):
                if s.startswith(text[-length:]):
                    hold = length
                    break
        self._pending = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold]

    def finish(self) -> str:
        """The held-back text once the stream ends without a stop string."""
        rest, self._pending = ("" if self.stopped else self._pending), ""
        return rest
