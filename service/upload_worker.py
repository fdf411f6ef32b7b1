"""``POST /runs`` checked and written in a supervised child process, so a large upload does not stall
``/dispatch`` and a crash of either process leaves nothing behind.

Why a process: validating a large document holds the GIL, and building rows takes it from the event
loop every switch interval; in a thread of the serving process both show up in ``/dispatch`` latency.
One upload process per app serves uploads one at a time (SQLite has one writer anyway), reading each
body from the file the route spooled it to (``service/upload_stream.py``: two incremental passes,
bounded memory).

Supervision (:class:`UploadWorker`, in the server):

- the child dies with the server: it asks Linux for SIGKILL when its parent goes
  (``PR_SET_PDEATHSIG``; it is started from the event loop's thread, which lives as long as the
  server), and a watcher thread also exits it once ``getppid()`` changes (other systems). Killed
  mid-upload, its transaction is never committed; and it re-checks that the server is alive just
  before committing;
- just before committing, the child asks the server whether the upload is still wanted (``("confirm",
  None)`` out, a bool back): a client that has gone (its connection closed) gets nothing committed;
- a cancelled upload (the server shutting down) kills the child, which never commits it;
- the child never dies of a document or of its database: any error of an upload is answered (and
  logged there), and a database it cannot open is reported upload by upload;
- a child that dies is replaced (the event loop watches each child's own sentinel, so a replacement
  is watched as the first one was), at once, or after ``RESTART_BACKOFF_S`` (doubling to
  ``MAX_BACKOFF_S``) when it had lived less than that: a child that cannot start is not restarted in a
  tight loop; an upload also starts one when it finds none. An upload it was writing (its pipe
  closed) is sent once more to the new child; a second death answers 503 with ``Retry-After``.
  ``/healthz`` reports the state, the restarts and how the last child ended;
- a commit whose answer was lost (the server killed between the child's commit and the 201) is safe
  to retry: the same document from the same uploader reuses the same runs and adds nothing (same run
  ids, ``runs_reused`` counts them, no row stored twice or rewritten: ``autotuner/records/provenance.py``).

Across the pipe go plain values: a spool file's path, the GPU models its uploader may send and the
uploader's name in, and ``("ok", summary)``, ``("invalid", errors)``, ``("refused", (status, message,
problems))`` (implausible rows or a GPU outside the token's scope: ``autotuner/records/plausibility.py``;
a stored run it would rewrite, 409: ``autotuner/records/provenance.py``; nothing written),
``("storage", (kind, reason))`` (damaged, read-only or full database), ``("abandoned", None)`` (the
client went before the commit; nothing written) or ``("error", type name)`` out (the child logs the
traceback itself).
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any, Awaitable, Callable

import anyio
import anyio.to_thread

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
BACKGROUND_NICENESS = 10
PARENT_POLL_S = 0.25
RESTART_BACKOFF_S = 1.0
REAP_S = 2.0
MAX_BACKOFF_S = 30.0


class ServerGone(RuntimeError):
    """The server died during the upload: its answer can never be sent, so nothing is committed."""


class ClientGone(RuntimeError):
    """The client closed its connection before the commit: nobody waits for the answer, nothing is committed."""


def die_with_parent(parent_pid: int) -> None:
    """In a child of the server: end this process when the server ends (see the module docstring)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watcher below still ends the process
    if os.getppid() != parent_pid:  # the parent died before the request above took effect
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def import_file(engine: Any, path: str, allowed_gpus: frozenset[str] | None = None,
                parent_pid: int | None = None, still_wanted: Callable[[], bool] | None = None,
                uploader: str | None = None) -> tuple[str, Any]:
    """Check and write the document at ``path`` (see the module docstring for the outcomes);
    ``allowed_gpus`` (None: any known model) are the GPU models its uploader may send, ``uploader`` the
    name its runs are stored with (``autotuner/records/provenance.py``); ``still_wanted()``, asked just
    before the commit, False where the client has gone."""
    from autotuner.records.exchange import ImportSummary
    from autotuner.records.plausibility import RefusedUpload
    from db.integrity import check_integrity
    from db.retry import in_transaction
    from service.upload_stream import DocumentErrors, check_file, write_file

    try:
        with open(path, "rb") as handle:
            runs = check_file(handle, allowed_gpus)
    except DocumentErrors as exc:
        return "invalid", [{**error, "input": None} for error in exc.errors]
    except RefusedUpload as refused:
        return "refused", (refused.status, str(refused), refused.details())
    # SQLite writes into a damaged file without complaint where the damage lies elsewhere: look first
    # (quick_check reads the whole file, about a second per GB; an upload is rare and large anyway).
    problem = check_integrity(engine, write_probe=False)
    if problem is not None:
        return "storage", (problem.kind, problem.reason)

    def write(session: Any) -> ImportSummary:
        with open(path, "rb") as handle:
            summary = write_file(session, handle, runs, uploader)
        if parent_pid is not None and os.getppid() != parent_pid:
            raise ServerGone("the server died before the upload was acknowledged")
        if still_wanted is not None and not still_wanted():
            raise ClientGone("the client closed its connection before the upload was committed")
        return summary

    # One transaction for the whole document, retried as a whole on a lock or serialization conflict;
    # on SQLite it takes the write lock at its start (BEGIN IMMEDIATE), so concurrent writers queue.
    writer = engine.execution_options(sqlite_begin="IMMEDIATE")
    try:
        summary = in_transaction(writer, write, what="upload of runs")
    except ClientGone as gone:
        log.warning("upload not stored: %s", gone)
        return "abandoned", None
    except RefusedUpload as refused:  # a stored run it would rewrite (provenance.py): rolled back
        return "refused", (refused.status, str(refused), refused.details())
    except Exception as exc:
        return _failed(exc)
    return "ok", summary.model_dump()


def serve_uploads(database_url: str, connection: Any, parent_pid: int) -> None:
    """The child's main loop: one spool path in, one outcome out, until the server closes the pipe.
    Nothing an upload or the database does ends it (see the module docstring)."""
    die_with_parent(parent_pid)
    os.nice(BACKGROUND_NICENESS)  # the serving process first (see service.reads)
    import service.upload_stream  # noqa: F401 - imported before the first upload, not during it
    from autotuner.records.plausibility import load_registry

    load_registry()  # the kernel registry the rules read, imported now too

    def still_wanted() -> bool:
        connection.send(("confirm", None))
        return bool(connection.recv())

    engine = None
    while True:
        try:
            path, allowed_gpus, uploader = connection.recv()
        except (EOFError, OSError):
            return
        try:
            engine = engine or _open_engine(database_url)
            outcome = import_file(engine, path, allowed_gpus, parent_pid, still_wanted, uploader)
        except (EOFError, BrokenPipeError, ConnectionError):
            return  # the server closed the pipe mid-upload (as it asked for the commit): nobody to answer
        except Exception as exc:
            outcome = _failed(exc)
        try:
            connection.send(outcome)
        except OSError:
            return


def _open_engine(database_url: str) -> Any:
    from db.engine import make_engine

    return make_engine(database_url, create=False)


def _failed(exc: Exception) -> tuple[str, Any]:
    """The outcome of an upload that failed outside ``import_file``'s own handling: the storage
    problem it names, else an error (logged with its traceback)."""
    from db.integrity import storage_problem

    problem = storage_problem(exc)
    if problem is not None:
        log.error("upload not stored: %s", problem.reason)
        return "storage", (problem.kind, problem.reason)
    log.exception("upload failed")
    return "error", type(exc).__name__


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


class UploadWorker:
    """The app's upload process, started on the first upload and replaced whenever found dead."""

    def __init__(self, database_url: str):
        self.database_url = database_url
        self.restarts = 0
        self.last_exit: str | None = None
        self.pending = 0  # uploads admitted by the route and not yet answered
        self.busy = False
        self._process: Any = None
        self._connection: Any = None
        self._started_at = 0.0
        self._backoff = RESTART_BACKOFF_S
        self._lock: anyio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._restart: asyncio.TimerHandle | None = None
        self._closing = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def state(self) -> str:
        if self._process is None:
            return "not started"
        if not self._process.is_alive():
            return "dead"
        return "busy" if self.busy else "idle"

    def _ensure_running(self) -> None:
        """Start the child, or replace a dead one. Called on the event loop's thread (see above)."""
        if self._restart is not None:
            self._restart.cancel()
            self._restart = None
        if self._process is not None and self._process.is_alive():
            return
        if self._process is not None:
            self._unwatch(self._process)
            self._reap()
            self.restarts += 1
            log.warning("upload process replaced (the last one %s)", self.last_exit)
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(target=serve_uploads, args=(self.database_url, theirs, os.getpid()),
                                  name="autotuner-upload", daemon=True)
        process.start()
        theirs.close()
        self._process, self._connection, self._started_at = process, ours, time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(process.sentinel, self._exited, process)

    def _unwatch(self, process: Any) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(process.sentinel)

    def _exited(self, process: Any) -> None:
        """A child ended. The current one is replaced now (after a backoff if it died young), unless an
        upload is on it (``run`` replaces it then). A callback of an earlier child changes nothing: its
        watch was removed when it was replaced, and its sentinel's descriptor may now be the current
        child's. The sentinel reads as closed a moment before the child can be reaped (Linux closes a
        dying process's files before it becomes a zombie), so the child is joined first: asked at
        once, ``is_alive`` could still say yes, and the replacement was skipped and the watch lost."""
        if process is not self._process:
            return
        self._unwatch(process)
        process.join(timeout=REAP_S)
        if process.is_alive():  # not ending after all (not seen): watch it again
            self._loop.add_reader(process.sentinel, self._exited, process)
            return
        if self._closing or self.busy:
            return
        lived = time.monotonic() - self._started_at
        if lived >= self._backoff:
            self._backoff = RESTART_BACKOFF_S
            self._ensure_running()
            return
        delay, self._backoff = self._backoff, min(2 * self._backoff, MAX_BACKOFF_S)
        log.warning("upload process %s after %.1f s; replacing it in %.0f s",
                    describe_exit(process.exitcode), lived, delay)
        self._restart = self._loop.call_later(delay, self._ensure_running)

    def _reap(self) -> None:
        self._process.join(timeout=5)
        self.last_exit = describe_exit(self._process.exitcode)
        self._connection.close()

    async def run(self, path: str, allowed_gpus: frozenset[str] | None = None,
                  still_wanted: Callable[[], Awaitable[bool]] | None = None,
                  uploader: str | None = None) -> tuple[str, Any]:
        """The outcome of importing the spooled document at ``path`` for ``uploader``, who may send
        ``allowed_gpus`` (see ``import_file``); ``still_wanted()`` is awaited when the child asks before
        its commit (None: always wanted); ``("died", how)`` when the upload process died on it twice.
        Cancelled halfway (the server shutting down), it kills the upload process, whose transaction
        then never commits, and a new one serves the next upload."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            for _attempt in range(2):
                if self._closing:
                    break
                self._ensure_running()
                self.busy = True
                try:
                    self._connection.send((path, allowed_gpus, uploader))
                    while True:
                        message = await anyio.to_thread.run_sync(self._connection.recv, abandon_on_cancel=True)
                        if message[0] != "confirm":
                            return message
                        self._connection.send(True if still_wanted is None else await still_wanted())
                except (EOFError, OSError):  # the child died: the pipe closed under us
                    self._process.join(timeout=5)
                    log.error("upload process %s during an upload", describe_exit(self._process.exitcode))
                except anyio.get_cancelled_exc_class():
                    self._process.kill()  # its answer would arrive for nobody, out of step with the pipe
                    raise
                finally:
                    self.busy = False
                    if not self._closing and not self._process.is_alive():  # died as it answered: its
                        self._exited(self._process)  # sentinel's callback found it busy and left it
            how = describe_exit(self._process.exitcode if self._process is not None else None)
            if not self._closing:
                self._ensure_running()  # a fresh one for the next upload
            return "died", how

    def close(self) -> None:
        self._closing = True
        if self._restart is not None:
            self._restart.cancel()
        if self._process is None:
            return
        self._unwatch(self._process)
        self._connection.close()  # the child's recv sees EOF and returns
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)
        self._process = None
