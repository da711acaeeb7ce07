"""How a flow fails on a user's mistake: one line in the run's logs and a Failed state carrying it, not the engine's
traceback. A bad deployment parameter, a missing artifact or a run that trained nothing is a ``StageError`` whose
message says what to fix; the traceback of our code would bury it in the Prefect UI. Called in-process (``gymforge
train ...``), the flow still raises the same error, which the command prints once."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from data_contracts.stage import StageError

F = TypeVar("F", bound=Callable[..., Any])

USER_ERROR = re.compile(r"encountered an exception (\w+):")
"""How Prefect's "Finished in state Failed(...)" lines name the exception of a failed run."""
USER_ERROR_LINE = "gymforge_user_error"
"""Marks the log record of a run's one error line: a command that prints the error itself leaves it off the console."""


def fails_cleanly(fn: F) -> F:
    """Decorate a flow function (below ``@flow``): a ``StageError`` ends the run Failed with its message."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        from prefect import get_run_logger
        from prefect.states import Failed

        try:
            return fn(*args, **kwargs)
        except StageError as exc:
            get_run_logger().error(str(exc), extra={USER_ERROR_LINE: True})
            _said_once()
            return Failed(message=str(exc), data=exc)

    return run  # type: ignore[return-value]


class _SaidAlready(logging.Filter):
    """Drops the engine's traceback of a StageError the run has logged as its one line already (a deployment
    run's engine re-raises the failed state's exception and logs it with its traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StageError))


def _said_once() -> None:
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _SaidAlready) for f in logger.filters):
            logger.addFilter(_SaidAlready())


def says_a_user_error(record: logging.LogRecord, errors: tuple[type[BaseException], ...]) -> bool:
    """Whether a log record says one of ``errors`` (or a subclass), which the command prints itself: the run's one
    error line, or a Prefect state line naming the exception."""
    if getattr(record, USER_ERROR_LINE, False):
        return True
    found = USER_ERROR.search(record.getMessage())
    return found is not None and found.group(1) in {cls.__name__ for cls in _with_subclasses(errors)}


def _with_subclasses(classes: tuple[type[BaseException], ...]) -> set[type[BaseException]]:
    seen: set[type[BaseException]] = set()
    todo = list(classes)
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            todo += cls.__subclasses__()
    return seen
