"""Shared by every test under tests/: tests/wall_clock.py (the limit on a test's subprocesses)
importable by name, however pytest is started, without this folder on sys.path.

pytest puts this folder first on sys.path to import this file. Its subfolders are named like the
packages under test (reference/, megakernel/, k3diff/), and for a bare `pytest --k3diff` (the
console script: the checkout itself is not on sys.path, the packages come from the editable
install's finder, which Python asks only after every sys.path entry) `import reference` would then
find tests/reference/ as a namespace package and the oracle would be missing. So the folder is
taken off again and wall_clock is registered by name."""
import importlib.util
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
while str(HERE) in sys.path:
    sys.path.remove(str(HERE))
if "wall_clock" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("wall_clock", HERE / "wall_clock.py")
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["wall_clock"] = _module
    _spec.loader.exec_module(_module)


def pytest_configure(config):
    config.addinivalue_line("markers", "long: takes minutes on CI's 2-core machine; started first")


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` first (a stable sort: the rest keep their order, pytest-randomly's
    shuffle included). Under `-n 2` a two-minute test drawn last leaves one core idle for two
    minutes; started first, the short tests fill the other core around it."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
