"""Run a writer on its own thread so writing overlaps the simulation (pyarrow and the compressor release the GIL).

The queue is bounded, so memory stays flat: the simulation waits when a writer falls behind.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pyarrow as pa

from atbprof.writers.base import RunWriter, TraceMeta

_DONE = object()


class BackgroundWriter:
    def __init__(self, inner: RunWriter, depth: int = 3) -> None:
        self.inner = inner
        self.filename = inner.filename
        self._q: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=f"atbprof-{inner.filename}", daemon=True)

    def open(self, directory: Path, meta: TraceMeta) -> None:
        self.inner.open(directory, meta)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is _DONE:
                return
            if self._error is None:
                try:
                    self.inner.write_batch(item)
                except BaseException as err:  # re-raised on the caller's thread
                    self._error = err

    def write_batch(self, batch: pa.RecordBatch) -> None:
        if self._error is not None:
            raise self._error
        self._q.put(batch)

    def close(self, steps: pa.Table) -> None:
        self._q.put(_DONE)
        self._thread.join()
        if self._error is not None:
            raise self._error
        self.inner.close(steps)

    def abort(self) -> None:
        """Stop the thread after a failure elsewhere; the caller removes the temp directory."""
        if self._thread.is_alive():
            self._error = self._error or RuntimeError("aborted")
            self._q.put(_DONE)
            self._thread.join()
        abort = getattr(self.inner, "abort", None)
        if abort is not None:
            abort()
