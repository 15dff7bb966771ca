"""What crosses the isolation socket (k3diff.transfer): the parent's tensors reach the child intact,
large ones shared; a reply from the child is plain data and tensors, and anything else (a pickle,
a cut or padded reply, a tensor whose bytes do not match its shape) is Malformed, never executed."""
import pickle

import pytest
import torch

from k3diff import transfer
from k3diff.transfer import Malformed, decode, encode, from_parent, to_child


def test_a_reply_round_trips_its_tensors_and_plain_data():
    reply = ["done", {"x": torch.randn(3, 4).to(torch.bfloat16), "ids": torch.arange(6).view(2, 3),
                      "empty": torch.empty(0, 5), "facts": [1, "two", 3.5, None, True]}]
    back = decode(encode(reply))
    assert back[0] == "done" and back[1]["facts"] == [1, "two", 3.5, None, True]
    for k in ("x", "ids", "empty"):
        assert back[1][k].dtype == reply[1][k].dtype and torch.equal(back[1][k], reply[1][k])


class _Boom:
    def __reduce__(self):
        return (print, ("a pickle from the candidate's process ran in k3diff's",))


@pytest.mark.parametrize("data", [
    pickle.dumps(("verdict", None)), pickle.dumps(_Boom()), b"", b"\x00" * 8,
    encode(["done", torch.ones(4)])[:-1], encode(["done", torch.ones(4)]) + b"x",
])
def test_anything_but_a_reply_is_malformed(data, capsys):
    with pytest.raises(Malformed):
        decode(data)
    assert "ran in k3diff" not in capsys.readouterr().out


def test_a_tensor_whose_bytes_do_not_match_its_shape_is_malformed():
    data = encode([torch.ones(4)]).replace(b'"shape": [4]', b'"shape": [5]')
    with pytest.raises(Malformed):
        decode(data)


def test_large_tensors_reach_the_child_shared_small_ones_by_value(monkeypatch):
    monkeypatch.setattr(transfer, "SHARE_BYTES", 1024)
    big, small = torch.randn(64, 64), torch.randn(4)
    back = from_parent(to_child({"big": big, "small": small, "view": big[3:5]}))
    assert back["big"].is_shared() and torch.equal(back["big"], big) and torch.equal(back["view"], big[3:5])
    assert not back["small"].is_shared() and torch.equal(back["small"], small)
    back["big"][0, 0] = 123.0               # the same memory: no second copy of a large weight
    assert big[0, 0].item() == 123.0


def _round_trip(calls, child_does=lambda got: None):
    """What the parent gets back for `calls` sent to a child that runs `child_does` on them in place
    (the child's side simulated in this process: the shared memory is the same)."""
    shares = []
    got = from_parent(to_child(calls, shares))
    child_does(got)
    data = encode(got)
    transfer.forget_received()
    return data, decode(data, refs=shares), shares


def test_a_shared_buffer_updated_in_place_goes_back_by_reference_and_is_judged_as_a_copy(monkeypatch):
    monkeypatch.setattr(transfer, "SHARE_BYTES", 1024)
    state, small = torch.randn(64, 64), torch.randn(4)
    data, back, shares = _round_trip({"state": state, "small": small}, lambda got: got["state"].mul_(2))
    assert len(data) < state.numel() * 4 and b'"r": 0' in data       # the bytes stayed where they were
    assert shares[0] is state and torch.equal(back["state"], state) and torch.equal(back["small"], small)
    state.add_(1)           # the child writing its buffer after the reply changes nothing judged
    assert not torch.equal(back["state"], state)


def test_a_tensor_the_child_replaced_or_moved_goes_back_by_value(monkeypatch):
    monkeypatch.setattr(transfer, "SHARE_BYTES", 1024)
    a, b = torch.randn(64, 64), torch.randn(64, 64)

    def replace(got):
        got["a"] = got["a"] * 3                     # a new tensor: not the parent's buffer
        got["b"].set_(torch.full((64, 64), 7.0))    # the same object over other memory
    data, back, _ = _round_trip({"a": a, "b": b}, replace)
    assert b'"r"' not in data
    assert torch.equal(back["a"], a * 3) and torch.equal(back["b"], torch.full((64, 64), 7.0))
    assert not torch.equal(b, back["b"])


@pytest.mark.parametrize("forged", [b'{"r": 1', b'{"r": -1', b'{"r": true', b'{"r": "0"'])
def test_a_reference_to_anything_but_a_shared_tensor_of_the_request_is_malformed(monkeypatch, forged):
    monkeypatch.setattr(transfer, "SHARE_BYTES", 1024)
    shares = []
    got = from_parent(to_child([torch.randn(64, 64)], shares))
    data = encode(got)
    transfer.forget_received()
    assert b'{"r": 0' in data
    with pytest.raises(Malformed):
        decode(data.replace(b'{"r": 0', forged), refs=shares)
    with pytest.raises(Malformed):      # no shared tensor sent: nothing to refer to
        decode(data)
    with pytest.raises(Malformed):      # another shape than the parent's buffer
        decode(data.replace(b'"shape": [64, 64]', b'"shape": [64, 32]'), refs=shares)


def test_through_the_candidates_process_a_shared_state_comes_back_by_reference_with_the_same_verdict(
        monkeypatch, tmp_path):
    """A KDA case whose states the parent shares (the threshold lowered): the candidate's process
    hands them back by reference and the verdict is the in-process one, bit for bit."""
    from k3diff import backends
    from k3diff.case import Case
    from k3diff.isolation import InProcessChecker, IsolatedChecker

    case = Case("kda", batch=4, state_idx=(3, 1, 0, 5), n_slots=6)
    case.validate()
    monkeypatch.setattr(transfer, "SHARE_BYTES", 1024)
    replies = []
    real = transfer.decode
    monkeypatch.setattr(transfer, "decode", lambda data, *a, **k: replies.append(data) or real(data, *a, **k))
    isolated = IsolatedChecker(None, device="cpu", inflight_dir=tmp_path)
    try:
        apart = isolated.check(case)
    finally:
        isolated.close()
    inside = InProcessChecker(backends.load_available(backends.default_name()), device="cpu").check(case)
    assert apart.ok and apart.to_dict() == inside.to_dict()
    assert any(b'{"r": ' in r for r in replies)
