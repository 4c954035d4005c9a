"""The one atomic file writer: a temp file in the same directory, fsync, rename over the target,
fsync of the directory. A crash leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_with(path: str | Path, write: Callable[[str], None], mode: int = 0o644) -> Path:
    """Create ``path`` atomically: ``write(temp_path)`` fills a temp file beside it (any writer:
    savefig, a serializer), which is then made ``mode``, fsynced and renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _fsync_dir(path.parent)
    return path


def write_bytes(path: str | Path, data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically (world-readable by default: reports, dashboards)."""
    return write_with(path, lambda tmp: Path(tmp).write_bytes(data), mode)


def write_text(path: str | Path, text: str, mode: int = 0o644) -> Path:
    return write_bytes(path, text.encode("utf-8"), mode)
