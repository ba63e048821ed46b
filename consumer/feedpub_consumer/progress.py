"""Progress bars (tqdm) for the commands people run: the consumer tools' and the server's;
and `counted`, how their summaries count things ("1 entry", "2 entries").

A bar goes to the command's stderr, and only when that is a terminal, unless `--progress`
or `--no-progress` says otherwise: stdout, which scripts read, never sees one, nor does a
piped stderr or a log collector. While a bar is on screen, log records and the lines a
command prints go around it instead of through it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


class Lines(Protocol):
    """Where a command prints lines: Django's OutputWrapper, or the consumer tools' own
    (consumer/feedpub_consumer/cli.py); `_out` is the stream beneath, which a bar writes to."""

    # A TextIO, typed Any: django-stubs leave OutputWrapper's `_out` out, and give every
    # attribute they do not name the type of the stream's methods (its __getattr__).
    _out: Any

    def write(self, msg: str = "", style_func=None, ending: str | None = None) -> None: ...


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when stderr is a "
                             "terminal)")


@contextmanager
def progress_bar(stderr: Lines, show: bool | None, **options: Any) -> Iterator[tqdm]:
    """A bar on the command's stderr (`show`: the --progress flag; None leaves it to tqdm,
    which shows it on a terminal only), closed on leaving; logging goes around it."""
    # The wrapped stream: Lines ends every write with a newline, tqdm's use \r.
    with (logging_redirect_tqdm(),
          tqdm(file=stderr._out, disable=None if show is None else not show,
               **options) as bar):
        yield bar


def write_around(stream: Lines, text: str) -> None:
    """Print a line on the command's stdout or stderr without tearing a bar on screen."""
    with tqdm.external_write_mode(file=stream._out):
        stream.write(text)


def counted(number: int, singular: str, plural: str | None = None) -> str:
    """`number` and the noun agreeing with it: "1 batch", "3 batches" (plural: the
    singular plus "s", unless given). English only: the commands speak nothing else."""
    if plural is None:
        plural = singular + "s"
    return f"{number} {singular if number == 1 else plural}"
