"""Shared by every test under tests/: this folder importable, for tests/wall_clock.py (the limit
on a test's subprocesses), however pytest is started."""
import pathlib
import sys

HERE = str(pathlib.Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
