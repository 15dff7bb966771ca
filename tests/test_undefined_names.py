"""No undefined name anywhere in the tree (pyflakes). The GPU-only tools run nowhere in CI, so a name
lost in a refactor shows only on a GPU, a session later: bench_kda's step_bytes went missing in
2af5a44 and every `bench_kda` and `scripts/bench_layer.py` row would have raised NameError."""
from pathlib import Path

import pyflakes.api
import pyflakes.messages as msg

ROOT = Path(__file__).resolve().parents[1]
UNDEFINED = (msg.UndefinedName, msg.UndefinedLocal, msg.UndefinedExport)


class _Collect:
    def __init__(self):
        self.found = []

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.found.append(f"{message.filename}:{message.lineno}: {message.message % message.message_args}")

    def syntaxError(self, filename, msg_, lineno, offset, text):  # noqa: N802 - pyflakes' reporter API
        self.found.append(f"{filename}:{lineno}: syntax error: {msg_}")

    def unexpectedError(self, filename, msg_):  # noqa: N802
        self.found.append(f"{filename}: {msg_}")


def test_no_undefined_names():
    got = _Collect()
    pyflakes.api.checkRecursive([str(ROOT / p) for p in ("k3diff", "megakernel", "reference", "scripts", "tests")], got)
    assert not got.found, "\n".join(got.found)
    planted = _Collect()                                # the check itself can fail
    pyflakes.api.check("def main():\n    return step_bytes(1)\n", "planted.py", planted)
    assert planted.found and "step_bytes" in planted.found[0]
