"""Test inputs built once per test run and shared by the pytest-xdist workers of the run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import pytest


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The directory ``name``, built by ``build(dir)`` once per test run: shared by the
    pytest-xdist workers of the run (their temporary directories have one parent), built by the
    first that asks while the others wait on a lock. Read it; write nothing into it."""
    import fcntl

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker else root
    out = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / f"{name}.done").exists():
            shutil.rmtree(out, ignore_errors=True)  # a build that failed half-way
            out.mkdir()
            build(out)
            (root / f"{name}.done").touch()
    return out


def sim_world(tmp_path_factory: pytest.TempPathFactory, scenario: str, *args: str) -> Path:
    """``ccab sim SCENARIO ARGS`` generated once per test run (:func:`once_per_run`)."""
    from ccab import cli

    def build(out: Path) -> None:
        assert cli.main(["sim", scenario, "--out", str(out), *args, "--workers", "1", "--no-progress"]) == 0

    return once_per_run(tmp_path_factory, "sim-" + "-".join([scenario, *args]).replace("--", ""), build)
