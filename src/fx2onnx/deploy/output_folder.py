"""The output folder of an export, written all or nothing, never over the checkpoint.

:func:`refuse_overlap` refuses an output folder inside the checkpoint folder, the checkpoint inside
the output, or the same folder, before anything is written. :class:`OutputFolder` gives the export
a temporary folder beside the output (``.NAME.fx2onnx-partial-XXXX``, on the same filesystem) and
renames it into place by :meth:`OutputFolder.commit`, once the folder is checked; an existing
output folder is replaced only then (an atomic exchange where Linux gives ``renameat2``), and only
if it is a folder this project wrote (its ``fx2onnx.json``) or an empty one. Anything raised before
the commit (an error, a failed check, ``KeyboardInterrupt``, ``SIGTERM``) removes the temporary
folder; a ``SIGKILL`` leaves it, recognisable by its name, and the next export to the same output
removes it. A lock (``.NAME.fx2onnx-lock``, ``flock``) refuses a second export to the same output
while one runs.

.. code-block:: python

    with OutputFolder("qwen3_onnx") as staging:
        write_everything(staging.path)
        if checked:
            staging.commit()
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import shutil
import signal
import threading
from typing import Any, Iterator

#: the file a folder written by the export holds (:data:`fx2onnx.runtime.folder.FOLDER_METADATA`)
METADATA = "fx2onnx.json"
#: the name of a temporary folder: ``.{output name}{PARTIAL}{random}``, beside the output
PARTIAL = ".fx2onnx-partial-"
#: the name of the lock file: ``.{output name}{LOCK}``, beside the output
LOCK = ".fx2onnx-lock"
_COMMITTED: list[str] = []  # the folders this process swapped in, for a Ctrl-C that comes after


def committed_folders() -> list[str]:
    """The output folders this process has swapped in, complete and checked (the command line says so
    when an interruption comes after the swap, instead of "nothing was written")."""
    return list(_COMMITTED)


class OutputFolderError(ValueError):
    """The output folder cannot be written: one line naming it and what to do."""


class ExportInterrupted(KeyboardInterrupt):
    """The export received SIGTERM: raised in the main thread so that the temporary folder is removed."""


def _real(path: str | os.PathLike) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _inside(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def refuse_overlap(source: str | os.PathLike, out: str | os.PathLike) -> None:
    """Raises :class:`OutputFolderError` when the output folder ``out`` is the checkpoint folder ``source``,
    lies inside it, or holds it (links resolved): the checkpoint is never written to."""
    src, dst = _real(source), _real(out)
    if src == dst:
        raise OutputFolderError(f"--out {os.fspath(out)!r} is the checkpoint folder itself: the export never writes into "
                                "the checkpoint; give another folder, e.g. --out "
                                f"{os.path.basename(src.rstrip(os.sep)) or 'model'}_onnx beside it.")
    if _inside(dst, src):
        raise OutputFolderError(f"--out {os.fspath(out)!r} lies inside the checkpoint folder {os.fspath(source)!r}: the "
                                "export never writes into the checkpoint; give a folder outside it.")
    if _inside(src, dst):
        raise OutputFolderError(f"--out {os.fspath(out)!r} holds the checkpoint folder {os.fspath(source)!r}: replacing it "
                                "would remove the checkpoint; give a folder outside it.")


def replaceable(out: str | os.PathLike) -> str | None:
    """Why the existing ``out`` cannot be replaced by an export (None: it does not exist, is an empty
    folder or a folder the export wrote)."""
    out = os.fspath(out)
    if not os.path.lexists(out):
        return None
    if os.path.islink(out) or not os.path.isdir(out):
        return f"--out {out!r} exists and is not a folder: remove it or choose another --out."
    names = os.listdir(out)
    if not names or METADATA in names:
        return None
    return (f"--out {out!r} holds {len(names)} file(s) the export did not write (no {METADATA}): the export replaces "
            "only a folder it wrote or an empty one; choose another --out or empty it.")


def partial_folders(out: str | os.PathLike) -> list[str]:
    """The temporary folders exports to ``out`` left (killed before they could remove them)."""
    parent, name = os.path.split(os.path.abspath(os.fspath(out)).rstrip(os.sep))
    if not os.path.isdir(parent):
        return []
    prefix = f".{name}{PARTIAL}"
    return sorted(os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(prefix))


def _exchange(a: str, b: str) -> bool:
    """Swaps the paths ``a`` and ``b`` atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), b)


def _take_lock(lock_path: str, out: str) -> int:
    """The descriptor of ``lock_path`` locked by this process (``flock``); :class:`OutputFolderError` when another
    export holds it. A lock file removed by the export releasing it meanwhile is opened again."""
    for _ in range(5):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputFolderError(f"another export is writing {out!r} (its lock {lock_path!r} is held): wait for it "
                                    "to end or choose another --out.") from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)
    raise OutputFolderError(f"the lock {lock_path!r} of {out!r} keeps changing: another export is starting; retry.")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises :class:`ExportInterrupted` in the main thread while the export runs (SIGINT already
    raises KeyboardInterrupt), so that ``finally`` clauses run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: Any) -> None:
        raise ExportInterrupted(f"interrupted by signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class OutputFolder:
    """A temporary folder beside ``out`` the export writes into, renamed into ``out`` by :meth:`commit`.

    Entering it takes the lock of ``out`` (:class:`OutputFolderError` when another export holds it),
    refuses an ``out`` it may not replace (:func:`replaceable`), removes what killed exports left
    (:func:`partial_folders`) and creates the temporary folder; leaving it removes the temporary
    folder unless committed, whatever ended the block.
    """

    def __init__(self, out: str | os.PathLike):
        self.out = os.path.abspath(os.fspath(out)).rstrip(os.sep)
        self.parent, self.name = os.path.split(self.out)
        self.path = ""
        self.committed = False
        self._lock: int | None = None
        self._signals: contextlib.ExitStack | None = None

    def __enter__(self) -> "OutputFolder":
        why = replaceable(self.out)
        if why:
            raise OutputFolderError(why)
        os.makedirs(self.parent, exist_ok=True)
        lock_path = os.path.join(self.parent, f".{self.name}{LOCK}")
        self._lock = _take_lock(lock_path, self.out)
        try:
            why = replaceable(self.out)  # again under the lock: another export may have written it meanwhile
            if why:
                raise OutputFolderError(why)
            for partial in partial_folders(self.out):  # left by a killed export: nothing else writes them now
                shutil.rmtree(partial, ignore_errors=True)
            self._signals = contextlib.ExitStack()
            self._signals.enter_context(_sigterm_interrupts())
            self.path = self._new_partial()
        except BaseException:
            self._release()
            raise
        return self

    def _new_partial(self) -> str:
        """A new empty folder beside the output, named as :func:`partial_folders` finds it (the usual
        permissions: ``mkdtemp`` would make it private)."""
        while True:
            path = os.path.join(self.parent, f".{self.name}{PARTIAL}{secrets.token_hex(4)}")
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                continue

    def commit(self) -> None:
        """Renames the temporary folder into ``out``, replacing the folder there (if any) in one step."""
        if self.committed:
            return
        why = replaceable(self.out)
        if why:
            raise OutputFolderError(why)
        if os.path.isdir(self.out) and os.listdir(self.out):
            if _exchange(self.path, self.out):  # self.path now holds the previous folder, removed on exit
                self.committed = True
                _COMMITTED.append(self.out)
                return
            previous = self._new_partial()
            os.rmdir(previous)
            os.rename(self.out, previous)
            os.rename(self.path, self.out)
            self.path = previous
        else:
            if os.path.isdir(self.out):
                os.rmdir(self.out)
            os.rename(self.path, self.out)
            self.path = ""
        self.committed = True
        _COMMITTED.append(self.out)

    def _release(self) -> None:
        if self._signals is not None:
            self._signals.close()
            self._signals = None
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.parent, f".{self.name}{LOCK}"))
            os.close(self._lock)
            self._lock = None

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.path and os.path.isdir(self.path):
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            self._release()
