"""The tests' slow subprocesses (nvcc, cuobjdump, child Pythons), run side by side.

One by one, these subprocesses were most of the suite's running time, and each uses one core. A test
module that needs them defines `background_jobs()` returning {key: callable}; when collection ends,
tests/conftest.py hands every collected module's jobs to one pool with a worker per core (threads
suffice: each job waits on its own process), so they run while other tests do. A test then asks for its
own outcome with `result(key)`; a job's exception is raised there, in the test that owns it.
"""
from __future__ import annotations

import os
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_futures: dict[str, Future] = {}
_scratch: tempfile.TemporaryDirectory | None = None


def workers() -> int:
    """Cores this process may run on (a container's CPU set can be smaller than the machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 2


def start(jobs: dict[str, Callable[[], Any]]) -> None:
    """Queue jobs in the order given; a key already queued keeps its first job."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="test-job")
        for key, job in jobs.items():
            if key not in _futures:
                _futures[key] = _pool.submit(job)


def scratch(name: str) -> Path:
    """A new empty folder for one module's job outputs, removed when the session ends."""
    global _scratch
    with _lock:
        if _scratch is None:
            _scratch = tempfile.TemporaryDirectory(prefix="tk_tests_")
        return Path(tempfile.mkdtemp(prefix=f"{name}_", dir=_scratch.name))


def result(key: str) -> Any:
    """The return value of job `key`, waiting for it to finish."""
    with _lock:
        future = _futures.get(key)
    if future is None:
        raise KeyError(f"no background job {key!r}: its module's background_jobs() did not list it, "
                       "or the module was not collected under tests/")
    return future.result()


def stop() -> None:
    """Drop the jobs not started yet (a run stopped early by -x), wait for the running ones, remove
    their scratch folders."""
    global _pool, _scratch
    with _lock:
        pool, _pool = _pool, None
        folder, _scratch = _scratch, None
        _futures.clear()
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
    if folder is not None:
        folder.cleanup()
