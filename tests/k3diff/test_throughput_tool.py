"""The throughput bench's verdict comparison (k3diff/tools/throughput.py): a speed-up may move a
float64 number in its last bits, never a verdict."""
from k3diff.tools.throughput import agreement

V = {"ok": True, "error": None, "reports": [{"name": "out", "ratio": 0.25, "max_abs": 1e-3, "ok": True}]}


def test_identical_is_bitwise():
    assert agreement(V, dict(V)) == "bitwise"


def test_last_bits_of_a_number_are_the_same_verdict():
    moved = dict(V, reports=[dict(V["reports"][0], ratio=0.25 * (1 + 1e-15))])
    assert agreement(V, moved) == "same"


def test_a_changed_verdict_or_a_real_change_differs():
    assert agreement(V, dict(V, ok=False)) == "DIFFERENT"
    assert agreement(V, dict(V, reports=[dict(V["reports"][0], ratio=0.26)])) == "DIFFERENT"
    assert agreement(V, dict(V, reports=[])) == "DIFFERENT"
