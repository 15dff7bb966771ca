"""python -m k3diff.tools.step_time: backends side by side on the same inputs (CPU, tiny dims)."""
from k3diff.tools import step_time


def test_backends_side_by_side(capsys):
    assert step_time.main(["--device", "cpu", "--preset", "tiny", "--stage", "kda", "--backends",
                           "torch-blocked,torch", "--batches", "1,3", "--iters", "1", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0] in ("1", "3")]
    assert [r[0] for r in rows] == ["1", "3"]
    for r in rows:                       # T, two times, one ratio: all positive numbers
        t_a, t_b, ratio = (float(v) for v in r[1:])
        assert t_a > 0 and t_b > 0 and abs(ratio - t_b / t_a) < 0.01 * ratio + 0.01


def test_a_backend_that_cannot_run_is_named_and_left_out(capsys):
    assert step_time.main(["--device", "cpu", "--preset", "tiny", "--stage", "moe", "--backends",
                           "torch-blocked,flashinfer", "--batches", "2", "--iters", "1", "--rounds", "1"]) == 0
    assert "flashinfer: left out" in capsys.readouterr().out


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert step_time.main(["--device", "cpu", "--backends", "nope"]) == step_time.EXIT_USAGE
    assert step_time.main(["--device", "cpu", "--batches", "1,x"]) == step_time.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "does not load" in err[0] and "integers" in err[1]


def test_a_distributed_backend_on_ranks_beside_a_one_device_one(capsys):
    """--ranks 2: the moe case on two gloo ranks for torch-blocked-ep, whole for torch-blocked;
    without --ranks the distributed backend says why it skips; a bad --ranks is one line."""
    assert step_time.main(["--device", "cpu", "--preset", "tiny", "--stage", "moe", "--ranks", "2",
                           "--backends", "torch-blocked,torch-blocked-ep", "--batches", "3",
                           "--iters", "1", "--rounds", "1"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.split()[:1] == ["3"]]
    assert len(rows) == 1 and len(rows[0]) == 4 and all(float(v) > 0 for v in rows[0][1:])
    assert step_time.main(["--device", "cpu", "--preset", "tiny", "--stage", "moe", "--backends",
                           "torch-blocked,torch-blocked-ep", "--batches", "2", "--iters", "1", "--rounds", "1"]) == 0
    assert "torch-blocked-ep: skips T=2 (a distributed backend: give --ranks N)" in capsys.readouterr().out
    assert step_time.main(["--device", "cpu", "--stage", "kda", "--ranks", "2"]) == step_time.EXIT_USAGE
    assert "--ranks takes 2..8" in capsys.readouterr().err
