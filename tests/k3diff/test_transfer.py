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
