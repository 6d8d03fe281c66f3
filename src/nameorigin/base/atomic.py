"""Writing files so that a crash never leaves a half-written one behind."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nameorigin.base.errors import WriteError


def write_atomically(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Let `write` fill a temporary file in the same folder, then rename it over `path` (atomic on POSIX). A write
    that fails (a full disk, a size limit) leaves no file behind and `path` as it was, and is one WriteError."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")  # same suffix: some writers check it
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as error:
        raise WriteError(path, error.strerror or str(error).splitlines()[0]) from None
    except RuntimeError as error:
        if not failed_write(error):
            raise
        raise WriteError(path, str(error).splitlines()[0]) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def failed_write(error: RuntimeError) -> bool:
    """torch.save's zip writer reports a failed write (EFBIG, ENOSPC) as a RuntimeError, not an OSError."""
    return "PytorchStreamWriter failed" in str(error) or "file write failed" in str(error)


def write_bytes_synced(data: bytes) -> Callable[[Path], None]:
    """A writer of `data` for write_atomically, synced to disk before the rename. Serializers that write files
    themselves are first run into memory and their bytes written here: torch's zip writer aborts the whole
    process when a write fails (a full disk), where Python's file writes raise an OSError."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    return write


def write_folder_atomically(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """write_atomically for a folder of files (Ray Data's output): `write` fills a temporary folder beside it,
    which then takes the folder's place; a failed write leaves the previous folder as it was."""
    path = Path(path)
    tmp, old = (path.with_name(f".{path.name}.{os.getpid()}.{kind}") for kind in ("tmp", "old"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except OSError as error:
        if old.exists() and not path.exists():
            os.replace(old, path)
        raise WriteError(path, error.strerror or str(error).splitlines()[0]) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return path
