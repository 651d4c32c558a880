"""The consoles the ``harbormq`` command writes to.

Nothing they print is read as rich markup or emoji codes. The texts carry
queue manager and queue names, paths, logins and peers' error messages, and
rich would read a ``[`` in one as a tag: ``[/x]`` raised MarkupError in place
of the error it was part of, ``[bold]Q`` printed as ``Q`` and ``:x:`` as an
emoji, naming the wrong thing. Styles are given as ``style=`` or as
``rich.text.Text`` parts, never in the text.

rich is imported on first use, not with the command: it costs about 0.1 s of
CPU, which ``harbormq start`` would otherwise spend before restart recovery
even begins (``PlainConsole`` below is what the server gets when its output is
not a terminal).
"""

from __future__ import annotations

import sys
from typing import TextIO


class LazyConsole:
    """A ``rich.console.Console(markup=False, emoji=False, highlight=False,
    **settings)``, made when first used."""

    def __init__(self, **settings):
        self._settings = {"markup": False, "emoji": False, "highlight": False, **settings}
        self._console = None

    def real(self):
        """The rich Console itself (for rich's own objects: Progress, Live)."""
        if self._console is None:
            from rich.console import Console
            self._console = Console(**self._settings)
        return self._console

    def __getattr__(self, name: str):
        if name.startswith("_"):      # (copy and pickle probe an instance not yet made)
            raise AttributeError(name)
        return getattr(self.real(), name)


class PlainConsole:
    """Lines of text as they are, flushed one by one: a server's operator
    messages when its output is a file or a pipe (where rich would print the
    same characters, at a cost per line)."""

    is_terminal = False

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout

    def print(self, text: str = "", *_objects, **_options) -> None:
        # one line, its whitespace as HMQERR01.LOG has it
        self.stream.write(" ".join(str(text).split()) + "\n")
        self.stream.flush()


console = LazyConsole()
err_console = LazyConsole(stderr=True)


def server_console() -> LazyConsole | PlainConsole:
    """The console of a server in the foreground: rich on a terminal (restart
    progress bars, coloured messages), plain lines otherwise."""
    return console if sys.stdout.isatty() else PlainConsole(sys.stdout)


def say(text: str, *, err: bool = False) -> None:
    """One message, never broken into lines by rich: paths stay whole for
    scripts (a terminal still wraps it)."""
    (err_console if err else console).print(text, soft_wrap=True)
