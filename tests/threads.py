"""Running jobs at the same instant in threads, each with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def run_at_once(jobs: list[Callable[[], object]]) -> list[object]:
    """Each job's result, or the exception it raised; all are released together."""
    barrier = threading.Barrier(len(jobs))
    results: list[object] = [None] * len(jobs)

    def run(index, job):
        try:
            barrier.wait()
            results[index] = job()
        except BaseException as error:  # noqa: BLE001 - handed back as the job's result
            results[index] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def raise_first_error(results: list[object]) -> list[object]:
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
