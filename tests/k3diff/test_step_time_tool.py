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
