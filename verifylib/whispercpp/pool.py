"""Run stage 01's independent whisper.cpp builds two at a time.

The variants of one audit (patched, unpatched, the two AddressSanitizer ones) share one
ggml build and differ only in libwhisper and the CLI, whose compile steps ``make`` runs
mostly one after another. Started together on a two-core machine they overlap instead of
queueing. Each build is still :func:`verifylib.whispercpp.build.build_whisper_cli` under
its own key's lock, so what is built, cached, re-hashed and recorded is exactly what the
sequential calls produce: only the wall clock changes (and each build's recorded
``seconds``, which now include the time it shared the machine).

The standard library's thread pool does the scheduling; what it does not do is stop the
workers' child processes when the waiting thread is interrupted, which
:meth:`BuildPool.close` does through :func:`verifylib.runtime.runner.kill_running`.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Hashable

from verifylib.runtime import runner

__all__ = ["BUILD_WORKERS", "BuildPool"]

# Two: the machines this suite targets have two cores; a third build would only queue.
BUILD_WORKERS = 2


class BuildPool:
    """Builds started early, each collected by name when the stage needs it.

    Use as a context manager: leaving it waits for every started build; leaving it by an
    exception (an interrupt included) first kills their running children and drops the
    builds not yet started.

    Parameters
    ----------
    workers : int
        Builds that run at once.
    """

    def __init__(self, workers: int = BUILD_WORKERS) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers),
                                            thread_name_prefix="verifylib-build")
        self._started: dict[Hashable, Future] = {}

    def start(self, name: Hashable, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Start ``fn(*args, **kwargs)`` in the background under ``name`` (once).

        Parameters
        ----------
        name : hashable
            What :meth:`result` asks for; a name already started is left as it is.
        fn : callable
            The build, e.g. :func:`verifylib.whispercpp.build.build_whisper_cli`.
        *args, **kwargs
            Its arguments.
        """
        if name not in self._started:
            self._started[name] = self._executor.submit(fn, *args, **kwargs)

    def result(self, name: Hashable, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Return the outcome of the build started as ``name``, or of ``fn(*args, **kwargs)`` now.

        Parameters
        ----------
        name : hashable
            The name given to :meth:`start`.
        fn : callable
            Called in this thread when nothing was started under ``name``.
        *args, **kwargs
            Its arguments (the same as the started build's, by the caller's contract).

        Returns
        -------
        object
            What the build returned.

        Raises
        ------
        Exception
            Whatever the build raised, re-raised here, in the stage's thread.
        """
        fut = self._started.get(name)
        if fut is None:
            return fn(*args, **kwargs)
        return fut.result()

    def close(self, *, abort: bool = False) -> None:
        """Wait for the started builds; with ``abort``, stop them first.

        Parameters
        ----------
        abort : bool
            Drop the builds not yet running and kill the children of those running.
        """
        if abort:
            for fut in self._started.values():
                fut.cancel()
            running = [f for f in self._started.values() if not f.done()]
            # A build between two of its steps has no child to kill yet: keep killing
            # until each running build has given up.
            while running:
                runner.kill_running()
                wait(running, timeout=0.2)
                running = [f for f in running if not f.done()]
        self._executor.shutdown(wait=True, cancel_futures=abort)

    def __enter__(self) -> "BuildPool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(abort=exc_type is not None)
