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
    assert set(m.STAGES) == set(m.CHAIN + m.SIDE + (m.FUSED,) + tuple(m.PREFETCH))


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


def test_prefetch_specs_place_each_stage_after_its_launch():
    stages = {"o": "s_pf_o", "a": "s_pf_a"}
    got = side_stream.parse_prefetch("o@g:32,a@start:all", stages)
    assert got == [("s_pf_o", "g", 32), ("s_pf_a", None, None)]
    assert side_stream.parse_prefetch("off", stages) == []
    base = side_stream.plan(("a", "b", "c"), ("g",), "c")
    out = side_stream.with_prefetches(base, got)
    assert out == [("fork", None), ("side", "g"), ("side", "s_pf_o"), ("main", "s_pf_a"),
                   ("main", "a"), ("main", "b"), ("join", None), ("main", "c")]
    fused = side_stream.with_prefetches(side_stream.fused_plan("x", ("a", "b")),
                                        [("s_pf_o", "x", 8)])
    assert fused == [("main", "x"), ("main", "s_pf_o"), ("main", "b")]


@pytest.mark.parametrize("spec", ["o@g", "o:32", "q@g:32", "o@g:0", "o@g:-1", "o@g:x",
                                  "o@g:8,o@h:16"])
def test_a_bad_prefetch_spec_is_refused_in_one_line(spec):
    with pytest.raises(ValueError, match="w@after:MiB"):
        side_stream.parse_prefetch(spec, {"o": "s_pf_o"})


def test_a_prefetch_after_a_launch_the_mode_lacks_is_refused():
    with pytest.raises(ValueError, match="no launch 'g'"):
        side_stream.with_prefetches(side_stream.fused_plan("x", ("a", "b")), [("s_pf_o", "g", 8)])


@pytest.mark.parametrize("step", ["mla", "kda"])
def test_the_default_prefetches_fit_both_modes(step):
    """Each mode's default spec names launches of that mode, and MEGAKERNEL_PREFETCH=off drops
    them (the plan is then the one without prefetch stages)."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    import importlib
    m = importlib.import_module(f"megakernel.{step}")
    short = {s.split("_pf_")[1]: s for s in m.PREFETCH}
    for mode in side_stream.MODES:
        pf = side_stream.parse_prefetch(m.PF_DEFAULT[mode], short)
        base = (side_stream.fused_plan(m.FUSED, m.CHAIN) if mode == "fused" else
                side_stream.plan(m.CHAIN, m.SIDE, {"mla": "mla_merge", "kda": "kda_norm"}[step]))
        got = side_stream.with_prefetches(base, pf)
        assert [x for x in got if x[1] not in m.PREFETCH] == base
        assert {s for _, s in got} - {s for _, s in base} == {s for s, _, _ in pf}


def test_prefetch_from_env(monkeypatch):
    monkeypatch.delenv("MEGAKERNEL_PREFETCH", raising=False)
    assert side_stream.prefetch_from_env()
    monkeypatch.setenv("MEGAKERNEL_PREFETCH", "off")
    assert not side_stream.prefetch_from_env()
    monkeypatch.setenv("MEGAKERNEL_PREFETCH", "maybe")
    with pytest.raises(ValueError, match="MEGAKERNEL_PREFETCH: on or off"):
        side_stream.prefetch_from_env()
    from megakernel.backend import MegakernelBackend
    why = MegakernelBackend().available()
    assert why is not None and why.startswith("MEGAKERNEL_PREFETCH: on or off")


def test_a_prefetch_region_is_a_prefix_of_every_row_or_the_whole_tensor():
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    import torch
    from megakernel.k_l2_prefetch import region
    w = torch.empty(7168, 12288, dtype=torch.bfloat16)        # MLA's o_proj, 168 MiB
    rows, rb, pre = region(w, 32)
    assert (rows, rb) == (7168, 24576) and pre % 16 == 0
    assert 32 * 2 ** 20 - 16 * rows < rows * pre <= 32 * 2 ** 20
    assert region(w, None) == (1, w.numel() * 2, w.numel() * 2)
    assert region(w, 10 ** 6) == region(w, None)
    a = torch.empty(14400, 7168, dtype=torch.bfloat16)[:2112]  # a row view (MLA's [q_a | kv_a])
    assert region(a, None) == (1, 2112 * 7168 * 2, 2112 * 7168 * 2)
