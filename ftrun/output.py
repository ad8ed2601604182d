"""Where ftrun may write, and how: the one home for output safety. Torch-free.

Contract:

* ``check_target(out, flag, inputs=..., reading=...)``: refuses (``BadInput``, one line) an
  output path that is one of the command's input files or lies inside a directory the command
  is reading (a run dir, a trace folder).
* ``atomic_path`` / ``atomic_open`` / ``atomic_write``: every file ftrun writes goes to a
  temporary name next to the target (``.ftrun-tmp-PID-NAME``, which readers skip) and is renamed
  over the target only once complete; on any error (a full disk, Ctrl-C, SIGTERM) the temporary
  is removed and the target is untouched, so no 0-byte or partial file ever sits under a final
  name. A full disk is one ``BadInput`` line ("cannot write ... (No space left on device)").
* ``check_writable``: an existing target is replaced only when it lies inside an ftrun dir (a
  run dir's marker ``.ftrun-run`` or an output dir's ``.ftrun-out`` in one of its parents), is
  itself a file ftrun wrote (``written_by_ftrun``: a Perfetto export, a JUnit report) or the
  user passed ``overwrite`` (``--overwrite``); a symlink is never turned into a file: it is
  refused, or with ``overwrite`` its target is written. A new file's directory must exist
  (``check_parent``), checked with the rest before the command's work starts.
* ``claim_output_dir``: compare's and sweep's output dir; one that ftrun creates gets the
  ``.ftrun-out`` marker; an existing dir ftrun did not make is written into only when none of
  the files the command writes is there already (or with ``overwrite``).
* ``check_name(flag, value)``: a user-given name is one path component of sane length.
* ``removed_if_empty_on_error(dir)``: a directory a failed command created stays behind only
  if something was written into it.
* Run dirs: ``claim_run_dir`` creates (or, with ``--overwrite``, replaces) ``<out>/<name>``.
  Only a dir ftrun identifies as its own (a manifest written by ftrun, or the run marker
  ``.ftrun-run`` that every run writes first) holding nothing but what ftrun creates is ever
  removed; symlinks are refused; the run dir is locked (``flock``) for the run's life, and a
  second writer gets ``in use by pid N``. Nothing that ftrun did not create is deleted.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from ftrun import gunzip, layout
from ftrun.errors import BadInput
from ftrun.small_files import read_head, read_json

RUN_MARKER = layout.RUN_MARKER
OUT_MARKER = layout.OUT_MARKER
MAX_NAME = 200  # leaves room for "-group<K>" and temporary suffixes under NAME_MAX (255)
# Everything ftrun itself puts into a run dir (see ftrun.layout).
RUN_DIR_ENTRIES = set(layout.OWN_ENTRIES)
_TMP_PREFIX = layout.TMP_PREFIX


# --- names and targets ---------------------------------------------------------------------


def check_name(flag: str, value: str) -> str:
    """``value`` must be a single path component (no ``/``, not ``.``/``..``) of at most
    ``MAX_NAME`` characters; else ``BadInput`` naming ``flag``."""
    if not value or not value.strip():
        raise BadInput(f"{flag}: must not be empty")
    if "/" in value or "\0" in value or value in (".", ".."):
        raise BadInput(f"{flag} {value!r}: must be a plain name (one path component, no '/' or '..')")
    if len(value) > MAX_NAME or len(value.encode()) > MAX_NAME:
        raise BadInput(f"{flag}: {len(value)} characters; names are at most {MAX_NAME}")
    return value


def _real(p: Path) -> Path:
    return Path(os.path.realpath(p))


def check_target(out: Path, flag: str, inputs: Iterable[Path] = (), reading: Iterable[Path] = ()) -> None:
    """Refuse ``out`` when it is one of ``inputs`` or inside one of the ``reading`` directories."""
    target = _real(out)
    for p in inputs:
        if _real(p) == target:
            raise BadInput(f"{flag} {out}: that is one of the inputs; refusing to overwrite it")
    for d in reading:
        d = _real(d)
        if target == d or target.is_relative_to(d):
            raise BadInput(f"{flag} {out}: inside {d}, which this command is reading; write it elsewhere")


@contextlib.contextmanager
def removed_if_empty_on_error(path: Path) -> Iterator[None]:
    """If the block fails, remove ``path`` when it did not exist before and is still empty (or
    holds only ftrun's output marker)."""
    fresh = not os.path.lexists(path)
    try:
        yield
    except BaseException:
        if fresh:
            with contextlib.suppress(OSError):
                if [e.name for e in Path(path).iterdir()] == [OUT_MARKER]:
                    (Path(path) / OUT_MARKER).unlink()
            with contextlib.suppress(OSError):
                Path(path).rmdir()  # only ever an empty directory
        raise


def in_ftrun_dir(path: Path) -> bool:
    """Does ``path`` lie inside a directory ftrun made (a run dir or an output dir)?"""
    for d in _real(path).parents:
        if (d / RUN_MARKER).is_file() or (d / OUT_MARKER).is_file():
            return True
    return False


# How a file ftrun wrote outside its own dirs announces itself in its first bytes (gunzipped):
# a Perfetto export's leading key, a JUnit report's root element. Rewriting one needs no flag.
FTRUN_SIGNATURES = (b'{"ftrun_export":', b'<testsuites name="ftrun"')
_HEAD = 4096


def written_by_ftrun(path: Path) -> bool:
    """Does ``path`` (a regular file) start like a file ftrun writes (``FTRUN_SIGNATURES``)?"""
    try:
        head = read_head(path, _HEAD, "file")  # (a FIFO, a device, a directory: not ftrun's)
    except BadInput:
        return False
    if head[:2] == b"\x1f\x8b":
        try:
            head = gunzip.Inflater().decompress(head, _HEAD)
        except gunzip.BrokenGzip:
            return False
    head = head.lstrip()
    if head.startswith(b"<?xml"):
        head = head[head.find(b"?>") + 2 :].lstrip()
    return any(head.startswith(sig) for sig in FTRUN_SIGNATURES)


def check_parent(path: Path, flag: str, parent_made: bool = False) -> None:
    """``BadInput`` unless a file can be created at ``path``: its directory exists (or, with
    ``parent_made``, the writer creates it: then its nearest existing ancestor must be a
    directory), so that a command refuses a bad output path before its work, not after."""
    parent = Path(os.path.abspath(path)).parent
    if parent.is_dir():
        return
    if not parent_made:
        what = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise BadInput(f"{flag} {path}: its directory {parent} {what}")
    for up in parent.parents:
        if up.is_dir():
            return
        if os.path.lexists(up):
            raise BadInput(f"{flag} {path}: {up} is not a directory")


def check_writable(path: Path, flag: str = "output", overwrite: bool = False, parent_made: bool = False) -> Path:
    """The path to write for target ``path`` (see the module contract); ``BadInput`` when
    writing would replace something that is not ftrun's without ``overwrite``, or when its
    directory does not exist (``check_parent``; ``parent_made``: the writer creates it). Every
    command calls it for each path it will write before it starts its work."""
    path = Path(path)
    if not os.path.lexists(path):
        check_parent(path, flag, parent_made)
        return path
    if path.is_symlink():
        if not overwrite:
            raise BadInput(
                f"{flag} {path}: is a symlink (to {os.path.realpath(path)}); refusing to replace it "
                "(pass --overwrite to write to its target, or write elsewhere)"
            )
        path = _real(path)
        if not os.path.lexists(path):
            check_parent(path, flag, parent_made)
            return path
    if path.is_dir():
        raise BadInput(f"{flag} {path}: is a directory")
    if not path.is_file():
        raise BadInput(f"{flag} {path}: exists and is not a regular file; refusing to replace it")
    if not overwrite and not in_ftrun_dir(path) and not written_by_ftrun(path):
        raise BadInput(
            f"{flag} {path}: exists and ftrun did not write it; refusing to overwrite it "
            "(pass --overwrite, or write elsewhere)"
        )
    return path


def claim_output_dir(out_dir: Path, flag: str, writes: Iterable[str], overwrite: bool = False) -> Path:
    """Create ``out_dir`` with ftrun's output marker, or accept an existing one: ftrun's, or a
    dir holding none of ``writes`` (else ``BadInput`` unless ``overwrite``). Returns it."""
    out_dir = Path(out_dir)
    if out_dir.is_symlink() and not overwrite:
        raise BadInput(
            f"{flag}: {out_dir} is a symlink; refusing to write through it (pass --overwrite, or pick another name)"
        )
    if os.path.lexists(out_dir) and not out_dir.is_dir():
        raise BadInput(f"{flag}: {out_dir} exists and is not a directory")
    if not out_dir.exists():
        try:
            out_dir.mkdir(parents=True)
        except FileExistsError:
            pass
        except OSError as e:
            raise BadInput(f"{flag}: cannot create {out_dir} ({e.strerror or e})") from None
        mark_output_dir(out_dir, flag)
        return out_dir
    if (out_dir / OUT_MARKER).is_file() or (out_dir / RUN_MARKER).is_file() or overwrite:
        return out_dir
    theirs = [w for w in writes if os.path.lexists(out_dir / w)]
    if theirs:
        raise BadInput(
            f"{flag}: {out_dir} is not a directory ftrun made and holds {', '.join(theirs)}; refusing to "
            "overwrite (pass --overwrite, or pick another name)"
        )
    return out_dir


def mark_output_dir(out_dir: Path, flag: str = "output") -> None:
    """Mark ``out_dir`` as made by ftrun (its files may then be replaced; ``check_writable``)."""
    if not (out_dir / OUT_MARKER).is_file():
        atomic_write(out_dir / OUT_MARKER, layout.to_json(layout.RunMarker(pid=os.getpid(), started=time.time())), flag)


def tmp_name(path: Path) -> Path:
    """The temporary name ``path`` is written under: same dir, same ending (writers that pick a
    format by the name, torch's ``.gz`` and matplotlib's ``.png``, still do)."""
    path = Path(path)
    return path.with_name(f"{_TMP_PREFIX}{os.getpid()}-" + path.name[-(250 - len(_TMP_PREFIX) - 12) :])


# --- atomic writes -------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(path: Path, flag: str = "output", overwrite: bool = False) -> Iterator[Path]:
    """A temporary path for a writer that takes a file name; renamed over ``path`` (checked by
    ``check_writable``) only when the ``with`` block completes."""
    path = check_writable(Path(path), flag, overwrite)
    tmp = tmp_name(path)
    ok = False
    try:
        yield tmp
        if not tmp.is_file():
            raise BadInput(f"{flag} {path}: nothing was written")
        os.replace(tmp, path)
        ok = True
    except OSError as e:
        raise BadInput(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                tmp.unlink()


@contextlib.contextmanager
def atomic_open(path: Path, flag: str = "output", overwrite: bool = False) -> Iterator[IO[bytes]]:
    """A binary file that replaces ``path`` only when the ``with`` block completes."""
    with atomic_path(path, flag, overwrite) as tmp:
        try:
            f = tmp.open("wb")
        except OSError as e:
            raise BadInput(f"{flag} {path}: cannot write ({e.strerror or e})") from None
        with f:
            yield f


def atomic_write(path: Path, data: bytes | str, flag: str = "output", overwrite: bool = False) -> None:
    with atomic_open(path, flag, overwrite) as f:
        f.write(data.encode() if isinstance(data, str) else data)


# --- run dirs ------------------------------------------------------------------------------


class RunDirLock:
    """An exclusive ``flock`` on a run dir, held until ``release()`` (or process exit)."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir, self.fd = run_dir, fd

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def _holder(run_dir: Path) -> str:
    marker = layout.read_run_marker(run_dir)
    return "?" if marker is None else str(marker.pid)


def _try_lock(run_dir: Path, flag: str) -> int:
    """Open and exclusively lock ``run_dir``; ``BadInput`` when another ftrun holds it."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{flag}: cannot open {run_dir} ({e.strerror or e})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise BadInput(f"{flag}: {run_dir} is in use by pid {_holder(run_dir)}") from None
        raise BadInput(f"{flag}: cannot lock {run_dir} ({e.strerror or e})") from None
    return fd


def wait_until_unlocked(run_dir: Path, timeout_s: float) -> str | None:
    """Wait up to ``timeout_s`` for no process to hold ``run_dir``'s lock (``RunDirLock``);
    None once free (or when there is no such dir), else the holder's pid as its marker names it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return None
        except OSError:
            if time.monotonic() >= deadline:
                return _holder(run_dir)
        finally:
            os.close(fd)
        time.sleep(0.2)


def is_ftrun_run_dir(run_dir: Path) -> bool:
    """Written by ftrun: its run marker, or a manifest that ftrun wrote."""
    if (run_dir / RUN_MARKER).is_file():
        return True
    try:
        read_json(run_dir / layout.MANIFEST, layout.MANIFEST_LIMIT, "manifest", layout.ManifestStamp)
    except BadInput:  # (unreadable, not JSON, nested too deeply, not a manifest)
        return False
    return True


def _removable(run_dir: Path, flag: str) -> None:
    """Refuse to delete ``run_dir`` unless it is ftrun's and holds only what ftrun creates."""
    if not is_ftrun_run_dir(run_dir):
        raise BadInput(
            f"{flag}: {run_dir} is not an ftrun run dir (no ftrun manifest or run marker); refusing to delete it"
        )
    foreign = sorted(
        e.name for e in run_dir.iterdir() if e.name not in RUN_DIR_ENTRIES and not e.name.startswith(_TMP_PREFIX)
    )
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise BadInput(f"{flag}: {run_dir} holds files ftrun did not write ({shown}); refusing to delete it")
    for e in run_dir.iterdir():
        if e.is_symlink():
            raise BadInput(f"{flag}: {e} is a symlink; refusing to delete {run_dir}")


def claim_run_dir(
    run_dir: Path, overwrite: bool, name_flag: str = "--run-name", inputs: Iterable[Path] = ()
) -> RunDirLock:
    """Create ``run_dir`` (replacing an ftrun run dir there only with ``overwrite``), lock it and
    write the run marker. The parent dir is locked meanwhile, so two claims never interleave.
    ``inputs`` (files the run reads) must not lie inside it."""
    for p in inputs:
        if _real(p).is_relative_to(_real(run_dir)):
            raise BadInput(f"{name_flag}: {run_dir} holds {p}, an input of this run; pick another name")
    root = run_dir.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        parent_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"--out {root}: cannot create ({e.strerror or e})") from None
    try:
        fcntl.flock(parent_fd, fcntl.LOCK_EX)  # short: only while checking, removing, creating
        if run_dir.is_symlink():
            raise BadInput(
                f"{name_flag}: {run_dir} is a symlink; refusing to replace it (remove the link or pick another name)"
            )
        if run_dir.exists():
            if not run_dir.is_dir():
                raise BadInput(f"{name_flag}: {run_dir} exists and is not a directory")
            if not overwrite:
                raise BadInput(
                    f"{name_flag} {run_dir.name}: {run_dir} already exists "
                    "(pass --overwrite to replace it, or pick another name)"
                )
            fd = _try_lock(run_dir, "--overwrite")
            try:
                _removable(run_dir, "--overwrite")
                shutil.rmtree(run_dir)
            except OSError as e:
                raise BadInput(f"--overwrite: cannot remove {run_dir} ({e.strerror or e})") from None
            finally:
                os.close(fd)
        try:
            run_dir.mkdir()
        except OSError as e:
            raise BadInput(f"--out {root}: cannot create {run_dir} ({e.strerror or e})") from None
        return mark_new_run_dir(run_dir, name_flag)
    finally:
        os.close(parent_fd)


def mark_new_run_dir(run_dir: Path, name_flag: str = "--run-name") -> RunDirLock:
    """Lock a run dir this process just created and write its run marker."""
    lock = RunDirLock(run_dir, _try_lock(run_dir, name_flag))
    atomic_write(
        run_dir / RUN_MARKER, layout.to_json(layout.RunMarker(pid=os.getpid(), started=time.time())), name_flag
    )
    return lock
