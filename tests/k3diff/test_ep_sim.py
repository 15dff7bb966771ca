"""k3diff.tools.ep_sim: the EP exchange pattern's bookkeeping (about 3 s on the CPU)."""
import pytest

from k3diff.tools import ep_sim


@pytest.mark.parametrize("ranks, batch", [(8, 1), (8, 8), (5, 3)])
def test_every_route_is_counted_once_and_rows_are_deduplicated_per_rank(ranks, batch):
    s = ep_sim.simulate(ranks, batch, experts=64, top_k=6, latent=32, steps=3)
    assert s["routes"] + s["local"] == pytest.approx(batch * 6)          # each route: off-rank or local
    assert s["rows"] <= s["routes"] + 1e-9                                # one row per (token, rank)
    assert s["rows"] <= batch * (ranks - 1) + 1e-9
    if batch == 1:
        assert s["link_max"] == 1                                          # one token: one row per link


def test_hot_routing_concentrates_the_traffic():
    natural = ep_sim.simulate(8, 16, "natural", experts=64, top_k=4, latent=32, steps=2)
    hot = ep_sim.simulate(8, 16, "hot", experts=64, top_k=4, latent=32, steps=2)
    assert hot["links"] < natural["links"] and hot["link_max"] > natural["link_max"]


def test_the_72_rank_table_prints(capsys):
    assert ep_sim.main(["--batches", "1,8", "--steps", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("K3 MoE exchange, 72 ranks, 896 experts contiguous (12..13 per rank), top-16")
    assert [line.split()[0] for line in out[2:]] == ["1", "8"]
    assert "/5112" in out[2]                 # 72 * 71 links


@pytest.mark.parametrize("args, why", [(["--ranks", "1"], "--ranks must lie in 2..896"),
                                       (["--batches", "x"], "--batches expects integers"),
                                       (["--routing", "zipf"], "unknown routing 'zipf'")])
def test_bad_arguments_are_one_line_and_exit_2(capsys, args, why):
    assert ep_sim.main(args) == ep_sim.EXIT_USAGE
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1
