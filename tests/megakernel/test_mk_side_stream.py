"""CPU: the attention steps' plans (megakernel/side_stream.py): forked, every launch of the step
exactly once, the side forked before its launches, and joined after all of them and before the
first launch that reads what the side writes; fused, the one x-side GEMV then the chain; the
mode switches."""
import pytest

from megakernel import side_stream


def _check(steps, chain, side, join_before):
    names = [s for w, s in steps if s is not None]
    assert sorted(names) == sorted(chain + side)
    assert [s for w, s in steps if w == "main"] == list(chain)
    kinds = [w for w, _ in steps]
    fork, join = kinds.index("fork"), kinds.index("join")
    assert kinds.count("fork") == kinds.count("join") == 1
    side_at = [i for i, (w, _) in enumerate(steps) if w == "side"]
    assert fork < min(side_at) and max(side_at) < join
    assert steps[join + 1] == ("main", join_before)


@pytest.mark.parametrize("step", ["mla", "kda"])
def test_every_fork_point_gives_a_sound_plan(step):
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")  # mla / kda import it
    import importlib
    m = importlib.import_module(f"megakernel.{step}")
    join = {"mla": "mla_merge", "kda": "kda_norm"}[step]
    for fork in m.FORKS.values():
        steps = side_stream.plan(m.CHAIN, m.SIDE, join, fork)
        _check(steps, m.CHAIN, m.SIDE, join)
        assert side_stream.launches(steps)[:2] == (
            (m.SIDE[0], m.CHAIN[0]) if fork is None else (m.CHAIN[0], m.SIDE[0]))
    fused = side_stream.fused_plan(m.FUSED, m.CHAIN)
    assert fused == [("main", s) for s in (m.FUSED,) + m.CHAIN[1:]]
    assert set(m.STAGES) == set(m.CHAIN + m.SIDE + (m.FUSED,))


def test_a_join_before_the_fork_is_refused():
    with pytest.raises(AssertionError):
        side_stream.plan(("a", "b", "c"), ("g",), "b", "c")


def test_mode_from_env(monkeypatch):
    monkeypatch.delenv("MEGAKERNEL_ATTN_STREAMS", raising=False)
    monkeypatch.setenv("MEGAKERNEL_STREAMS", "serial")
    assert side_stream.mode_from_env("fork") == "fused"
    for v in ("fork", "persistent"):
        monkeypatch.setenv("MEGAKERNEL_STREAMS", v)
        assert side_stream.mode_from_env("fork") == "fork"
        assert side_stream.mode_from_env("fused") == "fused"
    for v in side_stream.MODES:
        monkeypatch.setenv("MEGAKERNEL_ATTN_STREAMS", v)
        assert side_stream.mode_from_env("fork") == v
    monkeypatch.setenv("MEGAKERNEL_ATTN_STREAMS", "serial")
    with pytest.raises(ValueError, match="MEGAKERNEL_ATTN_STREAMS"):
        side_stream.mode_from_env("fork")


def test_a_bad_attention_stream_mode_makes_the_backend_unavailable(monkeypatch):
    """k3diff turns available()'s reason into one line and exit 4 before any case runs."""
    from megakernel.backend import MegakernelBackend
    monkeypatch.setenv("MEGAKERNEL_ATTN_STREAMS", "serial")
    why = MegakernelBackend().available()
    assert why is not None and why.startswith("MEGAKERNEL_ATTN_STREAMS: fused or fork")
