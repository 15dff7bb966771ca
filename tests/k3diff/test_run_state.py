"""The plugin keeps a run's state in one object under one key of pytest's `config.stash`
(k3diff/run_state.py), never in private attributes set on the config."""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from k3diff.run_state import RunState, run_state

ROOT = Path(__file__).resolve().parents[2]


def private_config_attributes(source: str) -> list[str]:
    """`config._k3diff...` attributes a module sets or reads, by name or through getattr/setattr's
    string (the config's old private state)."""
    out = set()
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Attribute) and n.attr.startswith("_k3diff"):
            out.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("_k3diff"):
            out.add(n.value)
    return sorted(out)


def test_no_module_keeps_state_on_the_config():
    found = {str(p.relative_to(ROOT)): attrs for p in sorted((ROOT / "k3diff").rglob("*.py"))
             if (attrs := private_config_attributes(p.read_text(encoding="utf-8")))}
    assert found == {}
    # planted: the form the plugin had
    planted = 'config._k3diff_shard = None\nx = config._k3diff\ny = getattr(config, "_k3diff_tail", None)'
    assert private_config_attributes(planted) == ["_k3diff", "_k3diff_shard", "_k3diff_tail"]


def test_one_state_per_config_made_on_first_use():
    a, b = SimpleNamespace(stash=pytest.Stash()), SimpleNamespace(stash=pytest.Stash())
    state = run_state(a)
    assert isinstance(state, RunState) and state.session is None and state.results == []
    state.results.append({"id": "x"})
    assert run_state(a) is state and run_state(a).results == [{"id": "x"}]
    assert run_state(b) is not state and run_state(b).results == []
