"""CPU: the fork-join steps' plans (megakernel/launch_plan.py): the attention steps'
(side_stream.Stages) and the MoE's (launch_streams.plan). Forked, every launch of the step
exactly once, the side forked before its launches, and joined after all of them and before the
first launch that reads what the side writes; fused, the one x-side GEMV then the chain; the
mode switches."""
import pytest

from megakernel import launch_plan, side_stream


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
    d = m.STEPS
    for name, fork in d.forks.items():
        steps = d.plan("fork", name)
        _check(steps, d.chain, d.side, d.join)
        assert launch_plan.launches(steps)[:2] == (
            (d.side[0], d.chain[0]) if fork is None else (d.chain[0], d.side[0]))
    fused = d.plan("fused", d.fork)
    assert fused == [("main", s) for s in (d.fused,) + d.chain[1:]]
    assert set(d.stages) == set(d.chain + d.side + (d.fused,))
    assert set(d.bind) <= set(d.stages) and set(d.variant) <= set(d.stages)


def test_a_join_before_the_fork_is_refused():
    with pytest.raises(AssertionError):
        launch_plan.plan(("a", "b", "c"), ("g",), "b", "c")


def test_the_stream_modes_come_from_the_settings():
    """MEGAKERNEL_STREAMS is the MoE's launch mode only; MEGAKERNEL_ATTN_STREAMS the attention
    steps' (unset: each step's measured default); a bad value of either is one line."""
    from megakernel import config
    s = config.from_env({"MEGAKERNEL_STREAMS": "serial"})
    assert s.moe.streams == "serial" and s.attn.streams is None
    assert config.from_env({}).moe.streams == "fork"
    for v in side_stream.MODES:
        assert config.from_env({"MEGAKERNEL_ATTN_STREAMS": v}).attn.streams == v
    for name, v in (("MEGAKERNEL_ATTN_STREAMS", "serial"), ("MEGAKERNEL_STREAMS", "fused")):
        with pytest.raises(ValueError, match=name):
            config.from_env({name: v})


def test_a_bad_attention_stream_mode_makes_the_backend_unavailable(monkeypatch):
    """k3diff turns available()'s reason into one line and exit 4 before any case runs."""
    from megakernel.backend import MegakernelBackend
    monkeypatch.setenv("MEGAKERNEL_ATTN_STREAMS", "serial")
    why = MegakernelBackend().available()          # reads the environment now, not the cache
    assert why is not None and why.startswith("MEGAKERNEL_ATTN_STREAMS: fused or fork")


def test_the_moe_plan_keeps_the_hand_ordered_waits():
    """launch_streams.plan against the 11-launch fork-join as it was written out by hand: the
    main stream's order, the side's, where the side starts, where out_shared is held, the join
    before the final sum; serial, the shared launches right after gemv_x."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    from megakernel import launch_streams as L
    main = ("gemv_x", "route", "schedule", "expert_up", "expert_down", "combine", "out_routed",
            "final_sum")
    side = ("gemv_shared", "shared_act", "out_shared")
    for fork, after in L.FORKS.items():
        for gate in L.GATES:
            p = L.plan(fork, gate)
            assert tuple(s for w, s in p if w == "main") == main
            assert tuple(s for w, s in p if w == "side") == side
            kinds = [w for w, _ in p]
            first = kinds.index("fork")              # the side starts here, before its launches
            assert first < p.index(("side", "gemv_shared"))
            assert first == 0 if after is None else p[first - 1] == ("main", main[after])
            assert max(i for i, (w, _) in enumerate(p) if w == "side") < kinds.index("join")
            assert p[kinds.index("join") + 1] == ("main", "final_sum")
            held = {"none": None, "up": "expert_up", "down": "expert_down"}[gate]
            i_sd = p.index(("side", "out_shared"))
            if held:
                assert ("fork", None) in p[p.index(("main", held)) + 1:i_sd]
    F, J = ("fork", None), ("join", None)
    m = lambda *n: [("main", x) for x in n]  # noqa: E731
    sd = lambda *n: [("side", x) for x in n]  # noqa: E731
    assert L.plan("after_route", "down") == (           # as launch_streams.launch wrote it
        m("gemv_x", "route") + [F] + m("schedule") + sd("gemv_shared", "shared_act")
        + m("expert_up", "expert_down") + [F] + sd("out_shared") + m("combine", "out_routed")
        + [J] + m("final_sum"))
    assert launch_plan.launches(L.SERIAL) == (
        "gemv_x", "gemv_shared", "shared_act", "route", "schedule", "expert_up", "expert_down",
        "out_shared", "combine", "out_routed", "final_sum")
