"""A pass needs judged evidence, and a bad input blames the right party: the rules behind the
attack table's rows (scripts/attacks.sh) that this package owns, each checked in this process
where it can be (CI runs on 2 cores). Each test failed before its rule."""
import json
import os
import sys
from pathlib import Path

import pytest

from k3diff import backends, cli
from k3diff import exit_codes as ex
from k3diff.backends.base import BackendError
from k3diff.case import Case
from k3diff.corpus import CorpusError, load, save
from k3diff.divergence import TensorReport
from k3diff.ep_config import MAX_RANKS
from k3diff.isolation import InProcessChecker, IsolatedChecker
from k3diff.verdict import Verdict

HERE = Path(__file__).parent
if str(HERE) not in sys.path:            # the candidates' module, for this process and its children
    sys.path.insert(0, str(HERE))
GOOD = Case("moe", batch=1)


# ---------------------------------------------------------------- a pass needs judged evidence

def test_a_verdict_over_zero_tensors_is_not_a_pass():
    empty = Verdict(GOOD, "x")
    assert not empty.ok and empty.nothing_judged
    assert empty.headline().startswith("FAIL") and "nothing judged" in empty.failures()[0]
    assert empty.to_dict()["ok"] is False
    skipped = Verdict(GOOD, "x", skipped="does not implement stage 'moe'")
    assert not skipped.nothing_judged and skipped.headline().startswith("SKIP")       # skipped: not judged at all
    judged = Verdict(GOOD, "x", reports=[TensorReport("moe", "out", True, bound=1.0)])
    assert judged.ok and not judged.nothing_judged


def test_a_backend_with_no_stage_is_refused_at_load():
    with pytest.raises(BackendError, match=r"claims no stage \(`stages` is empty\)") as info:
        backends.load_available("crashing_candidates:NoStages")
    assert ex.status_of(info.value) == ex.BACKEND and "\n" not in str(info.value)


def test_provides_is_frozen_at_load():
    import crashing_candidates as cc

    loaded = backends.load_available("crashing_candidates:ProvidesNothingLater")
    assert loaded.stages == ("moe",) and "out" in loaded.frozen_provides["moe"]
    verdict = InProcessChecker(loaded, device="cpu").check(GOOD)
    assert not verdict.ok and "provides('moe') changed since the load-time check" in verdict.error, verdict.error
    # unwrapped (as a MutantBackend is judged), the empty answer leaves nothing to judge: a failure too
    raw = cc.ProvidesNothingLater()
    raw.provides("moe")
    verdict = InProcessChecker(raw, device="cpu").check(GOOD)
    assert not verdict.ok and verdict.nothing_judged, verdict.headline()


def test_the_parent_records_the_load_time_provides(tmp_path):
    checker = IsolatedChecker("torch-blocked", device="cpu", inflight_dir=tmp_path)
    try:
        info = dict(checker.start().provides)
    finally:
        checker.close()
    assert set(info) == {"moe", "mla", "kda", "layer"} and "out" in info["moe"]


def test_hunt_judges_every_stage_it_is_asked_for(capsys):
    status = cli.main(["hunt", "--backend", "crashing_candidates:MoeOnly", "--stage", "moe", "--stage", "kda",
                       "--examples", "2", "--isolate", "off"])
    err = capsys.readouterr().err
    assert status == ex.NOTHING_JUDGED and "nothing judged for stage kda" in err and len(err.splitlines()) == 1, err


# ---------------------------------------------------------------- blame: seeds and the command line

def test_an_ep_seed_has_the_option_s_rank_limit(tmp_path):
    def seed(ranks):
        case = {"stage": "moe", "version": 1, "batch": 2, "ep_ranks": ranks, "ep_placement": "contiguous",
                "ep_owners": [e % ranks for e in range(Case("moe").config().n_experts)]}
        path = tmp_path / f"ep{ranks}.json"
        path.write_text(json.dumps({"k3diff_seed_format": 1, "case": case}))
        return path

    assert load(seed(MAX_RANKS))[0].ep_ranks == MAX_RANKS
    with pytest.raises(CorpusError, match=rf"ep_ranks must lie in 1\.\.{MAX_RANKS}") as info:
        load(seed(MAX_RANKS + 1))
    assert ex.status_of(info.value) == ex.SEED


@pytest.mark.parametrize("argv, message", [
    (["hunt", "--backend", "torch-blocked", "--stage", "attention"], "must be one of moe, mla, kda, layer"),
    (["mutants", "--control-examples", "0"], "must be >= 1"),
    (["mutants", "--device", "foo"], "is not a device name"),
    (["report"], "give results files"),
    (["report", "a.jsonl", "--compare", "b", "c"], "give results files")])
def test_every_command_line_value_error_is_exit_4(argv, message, capsys):
    try:
        status = cli.main(argv)
    except SystemExit as exc:           # argparse's own: _Parser.error
        status = exc.code
    err = capsys.readouterr().err
    assert status == ex.USAGE and message in err and len(err.splitlines()) == 1, (status, err)


# ---------------------------------------------------------------- writes into shared folders

def test_a_seed_save_never_follows_a_planted_link(tmp_path, monkeypatch):
    import secrets

    victim = tmp_path / "victim"
    victim.write_text("precious")
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    from k3diff.corpus import case_id

    final = seeds / f"moe-{case_id(GOOD)}.json"
    final.symlink_to(victim)                          # at the seed's own name: replaced, not written through
    path = save(GOOD, {"ok": False}, seeds, "torch-blocked")
    assert path == final and not path.is_symlink() and load(path)[0] == GOOD
    assert victim.read_text() == "precious"
    # at the temporary's name (made predictable here): refused, never followed
    monkeypatch.setattr(secrets, "token_hex", lambda n: "feed")
    tmp = seeds / f".{final.name}.{os.getpid()}-feed.tmp"
    tmp.symlink_to(victim)
    with pytest.raises(FileExistsError):
        save(GOOD, {"ok": False}, seeds, "torch-blocked")
    assert victim.read_text() == "precious"


def test_the_cli_keeps_its_in_flight_note_in_the_save_folder(tmp_path, monkeypatch):
    from k3diff import session
    from k3diff.options import DEFAULT_SAVE

    seen = {}

    def fake_open(spec, **kw):
        seen.update(kw)
        raise BackendError("stop here")

    monkeypatch.setattr(session, "open_candidate", fake_open)
    seed = tmp_path / "one.json"
    seed.write_text(json.dumps({"k3diff_seed_format": 1, "case": GOOD.to_dict()}))
    assert cli.main(["replay", str(seed), "--backend", "torch-blocked"]) == ex.BACKEND
    assert seen["inflight_dir"] == DEFAULT_SAVE
    assert cli.main(["hunt", "--backend", "torch-blocked", "--save", str(tmp_path / "notes")]) == ex.BACKEND
    assert seen["inflight_dir"] == str(tmp_path / "notes")


# ---------------------------------------------------------------- show prints data as data

def test_show_escapes_every_field_and_builds_its_own_replay_command(tmp_path, capsys):
    record = {"k3diff_seed_format": 1, "case": GOOD.to_dict(), "backend": "evil\x1b]0;owned\x07:X",
              "replay": "rm -rf ~; k3diff replay x", "verdict": {"ok": False, "reports": []}}
    path = tmp_path / "odd \x1b[31mname.json"
    path.write_text(json.dumps(record))
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "rm -rf" not in out, out
    assert "evil\\x1b]0;owned\\x07:X" in out and "not registered here" in out
    replay = [line for line in out.splitlines() if line.startswith("replay: ")]
    assert replay == [f"replay: k3diff replay $'{tmp_path}/odd \\x1b[31mname.json'"], replay
    plain = tmp_path / "a b.json"
    plain.write_text(json.dumps(dict(record, backend="torch-blocked")))
    assert cli.main(["show", str(plain)]) == 0
    assert f"replay: k3diff replay '{plain}' --backend torch-blocked" in capsys.readouterr().out


def test_a_hunt_goes_on_past_a_case_too_large_and_does_not_call_that_a_pass(monkeypatch, capsys):
    """A hunt (and the mutants and schedule tables built on one) met a case too large for a GPU
    another run was filling and ended in a traceback. The case is skipped and the hunt goes on, as
    in a fuzz run; with no failure found it is not a pass: one line, exit 11 (the machine's)."""
    from k3diff import sizing
    from k3diff.search import first_failure_over
    from k3diff.strategies import cases

    real = sizing.check_fits

    def fits_below_eight(case, device):
        if case.batch > 8:
            raise sizing.CaseTooLarge(f"case too large for {device}: needs about 9.0 GiB, 0.1 GiB free ({case.label()})")
        return real(case, device)

    monkeypatch.setattr(sizing, "check_fits", fits_below_eight)
    monkeypatch.setattr("k3diff.runner.check_fits", fits_below_eight, raising=False)
    judged, counts = [], {}

    def check(case):
        from k3diff.runner import check_case
        from k3diff.backends.blocked import TorchBlockedBackend

        v = check_case(case, TorchBlockedBackend(), device="cpu")
        judged.append(case.batch)
        return v

    verdict, n, _, _ = first_failure_over(["moe"], lambda st: cases(st), check, examples=12, seed=3, counts=counts)
    assert verdict is None and n == 12
    assert counts["too_large"] >= 1 and counts["too_large"] + len(judged) == 12, (counts, judged)
    assert all(b <= 8 for b in judged) and counts["too_large_first"].startswith("case too large for cpu")

    status = cli.main(["hunt", "--backend", "torch-blocked", "--stage", "moe", "--examples", "12", "--seed", "3",
                       "--isolate", "off"])
    out, err = capsys.readouterr()
    assert status == ex.MACHINE, out + err
    assert err.startswith("k3diff: no failure in 12 examples, but ") and "not a pass" in err
    assert len(err.splitlines()) == 1 and "rerun: " in out
