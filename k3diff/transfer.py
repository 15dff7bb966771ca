"""What crosses the socket between k3diff and the candidate's process, in each direction.

Parent to child (`to_child`): pickled, with torch's sharing reductions where they save a copy: a
large tensor (>= SHARE_BYTES: the expert weights at production dims) goes as a CUDA IPC handle or
through shared memory (the child maps the parent's memory: weights are never held twice), anything
smaller by value, on its device. The child trusts its parent, so it may unpickle.

Child to parent (`encode` / `decode`): never a pickle. Unpickling what the candidate's process
wrote would run whatever it chose in the judging process, so a reply is a JSON header (plain
strings, numbers, lists and dicts) plus raw tensor bytes, rebuilt here under a fixed list of
dtypes. Anything else, a short or trailing byte included, is `Malformed`: the caller turns it into
a `crash:` verdict. Nothing in a reply can be a verdict: it carries tensors and facts the parent
judges itself.

A tensor the parent shared with the request and that the child hands back as it got it (the same
object over the same memory: a cache or state the candidate updated in place) goes back as a
reference, `{"r": k}`, to the parent's own k-th shared tensor, not as its bytes: those bytes are
already in the parent's memory. The parent takes a copy of its buffer (`decode(..., refs=)`), so
nothing the child does after its reply changes what is judged, and a reference to anything but a
tensor of that request, of that dtype and shape, is Malformed. Sending the bytes instead moved
66-152 MB a step back through host memory and the socket for a small-preset KDA, layer or MLA case.

Why small CPU tensors go by value: making a fresh shared-memory segment cost 13-16 ms per tensor on
the project's loaded 2-core CI box (torch `_share_fd_cpu_` / `_share_filename_cpu_`), where a copy
of a case's inputs and outputs takes microseconds.
"""
from __future__ import annotations

import io
import json
import pickle
import struct
from multiprocessing.reduction import ForkingPickler

import numpy
import torch
import torch.multiprocessing as tmp  # torch's reductions for ForkingPickler, and from_parent's rebuild functions
from torch.multiprocessing.reductions import reduce_tensor

SHARE_BYTES = 64 << 20          # CPU tensors at least this large travel through shared memory
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}
_HEAD = struct.Struct("<Q")
_ALIGN = 8                      # a reply's header and tensors start at multiples of this (the largest itemsize)


class Malformed(ValueError):
    """A reply from the candidate's process that is not one k3diff can read."""


# ---------------------------------------------------------------- parent -> child

def to_child(obj, shares: list | None = None) -> memoryview:
    """`obj` pickled for the candidate's process, large and device tensors shared, not copied; the
    shared ones appended to `shares` in the order the child numbers them (a reply refers to them
    by that number: `decode(..., refs=shares)`)."""
    shares = [] if shares is None else shares

    class _Pickler(ForkingPickler):
        def reducer_override(self, o):
            if not isinstance(o, torch.Tensor):
                return NotImplemented
            if shared(o):
                shares.append(o)
                return _shared_in, (len(shares) - 1, *reduce_tensor(o))
            # in-band but not copied first: protocol 5 writes a writable buffer straight into the
            # stream, and the child gets it back as a bytearray its tensor views in place
            return _by_value, (o.dtype, tuple(o.shape), pickle.PickleBuffer(_writable_bytes(o)), str(o.device))

    previous = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy("file_system")  # no descriptor to pass: the child opens the segment by name
    try:
        buf = io.BytesIO()
        _Pickler(buf, 5).dump(obj)
        return buf.getbuffer()
    finally:
        tmp.set_sharing_strategy(previous)


def tensor_bytes(obj) -> int:
    """Bytes of the tensors in `obj` (through dicts, lists and tuples), each padded as a reply pads
    it: the most a reply to it can carry as tensors."""
    if isinstance(obj, torch.Tensor):
        n = obj.numel() * obj.element_size()
        return n + (-n % _ALIGN)
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def shared(t) -> bool:
    """Whether `to_child` shares this tensor (the child writes k3diff's own memory) or copies it."""
    return isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() >= SHARE_BYTES


# child side: the tensors the request being answered shared, by the parent's number, each with
# where it lay when it came (an in-place `set_` onto other memory is no longer the parent's buffer)
_received: dict = {}


def from_parent(data: bytes):
    _received.clear()
    return pickle.loads(data)


def forget_received() -> None:
    """Drop the child's hold on the last request's shared tensors once it has replied (a CUDA
    tensor the child still maps cannot be freed by the parent: k3diff.isolation._collect_shared)."""
    _received.clear()


def _shared_in(k: int, rebuild, args) -> torch.Tensor:
    t = rebuild(*args)
    _received[k] = (t, _where(t))
    return t


def _where(t: torch.Tensor) -> tuple:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device)


def _writable_bytes(t: torch.Tensor):
    """The tensor's bytes on the host, a writable uint8 array over them (a copy only for a device
    or non-contiguous tensor)."""
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy() if t.numel() else bytearray()


def _by_value(dtype, shape, raw, device: str = "cpu") -> torch.Tensor:
    if not len(raw):
        return torch.empty(shape, dtype=dtype, device=device)
    raw = raw if isinstance(raw, bytearray) else bytearray(raw)       # the tensor owns writable memory
    t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)
    return t if device == "cpu" else t.to(device)


def _copied_out(raw: memoryview, dtype, shape) -> torch.Tensor:
    """A tensor of its own (one copy) from bytes of a reply, which is dropped once decoded."""
    if not raw.nbytes:
        return torch.empty(shape, dtype=dtype)
    out = torch.empty(raw.nbytes, dtype=torch.uint8)
    out.numpy()[:] = numpy.frombuffer(raw, dtype=numpy.uint8)
    return out.view(dtype).reshape(shape)


# ---------------------------------------------------------------- child -> parent

def encode_parts(obj) -> list:
    """A reply as the buffers to send one after another: the JSON header (padded to 8 bytes) and
    each tensor's bytes as they lie in host memory (a view, not a copy: a device tensor is copied
    to the host once), each padded to 8 bytes so the parent can view every tensor in place."""
    blobs: list = []
    theirs = {id(t): (k, where) for k, (t, where) in _received.items()}

    def walk(o):
        if isinstance(o, torch.Tensor):
            name = str(o.dtype).removeprefix("torch.")
            if name not in _DTYPES:
                raise TypeError(f"cannot send a {name} tensor")
            k, where = theirs.get(id(o), (None, None))
            if k is not None and _received[k][0] is o and _where(o) == where:
                return {"r": k, "dtype": name, "shape": list(o.shape)}
            blobs.append(memoryview(_writable_bytes(o)))
            return {"t": len(blobs) - 1, "dtype": name, "shape": list(o.shape)}
        if isinstance(o, dict):
            return {"d": [[str(k), walk(v)] for k, v in o.items()]}
        if isinstance(o, (list, tuple)):
            return {"l": [walk(v) for v in o]}
        if o is None or isinstance(o, (str, int, float, bool)):
            return {"v": o}
        return {"v": str(o)}

    head = json.dumps({"tree": walk(obj), "sizes": [b.nbytes for b in blobs]}).encode()
    head += b" " * (-(_HEAD.size + len(head)) % _ALIGN)         # JSON ends in whitespace freely
    parts = [_HEAD.pack(len(head)) + head]
    for b in blobs:
        parts += [b, bytes(-b.nbytes % _ALIGN)] if b.nbytes % _ALIGN else [b]
    return parts


def encode(obj) -> bytes:
    """`encode_parts` joined: the reply as one bytes object."""
    return b"".join(encode_parts(obj))


def decode(data, device=None, refs=()):
    """The reply `encode` made, tensors on `device`; Malformed for anything else. `refs`: the
    tensors the request shared (`to_child`'s `shares`), which the reply may name instead of
    sending; each named one comes back as a copy, contiguous like a tensor sent by value.
    `data` may be bytes or a bytearray (read in place: each tensor is one copy out of it)."""
    try:
        (n,) = _HEAD.unpack_from(data, 0)
        head = json.loads(bytes(data[_HEAD.size:_HEAD.size + n]).decode())
        sizes = head["sizes"]
        if not (isinstance(sizes, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                for s in sizes)):
            raise Malformed("bad sizes")
        if (_HEAD.size + n) % _ALIGN:
            raise Malformed("header not aligned")
        offsets, at = [], _HEAD.size + n
        for s in sizes:
            offsets.append((at, at + s))
            at += s + (-s % _ALIGN)
        if at != len(data):
            raise Malformed("length mismatch")
        return _rebuild(head["tree"], memoryview(data), offsets, device, 0, refs)
    except Malformed:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever it is, it is not a reply
        raise Malformed(f"{type(exc).__name__}: {exc}"[:200]) from None


def _rebuild(node, data, offsets, device, depth, refs):
    if depth > 32 or not isinstance(node, dict) or len(node) == 0:
        raise Malformed("bad node")
    if "v" in node and len(node) == 1:
        if node["v"] is not None and not isinstance(node["v"], (str, int, float, bool)):
            raise Malformed("bad value")
        return node["v"]
    if "l" in node and len(node) == 1:
        return [_rebuild(v, data, offsets, device, depth + 1, refs) for v in node["l"]]
    if "d" in node and len(node) == 1:
        out = {}
        for item in node["d"]:
            k, v = item
            if not isinstance(k, str):
                raise Malformed("bad key")
            out[k] = _rebuild(v, data, offsets, device, depth + 1, refs)
        return out
    if set(node) == {"t", "dtype", "shape"}:
        dtype = _DTYPES.get(node["dtype"])
        shape = node["shape"]
        if dtype is None or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise Malformed("bad tensor")
        index = node["t"]
        if not isinstance(index, int) or not 0 <= index < len(offsets):
            raise Malformed("bad tensor index")
        lo, hi = offsets[index]
        numel = 1
        for s in shape:
            numel *= s
        if hi - lo != numel * dtype.itemsize:
            raise Malformed("tensor size")
        t = _copied_out(data[lo:hi], dtype, tuple(shape))
        return t if device is None else t.to(device)
    if set(node) == {"r", "dtype", "shape"}:
        k = node["r"]
        if not (isinstance(k, int) and not isinstance(k, bool) and 0 <= k < len(refs)):
            raise Malformed("bad reference")
        mine = refs[k]
        if str(mine.dtype).removeprefix("torch.") != node["dtype"] or list(mine.shape) != node["shape"]:
            raise Malformed("reference dtype or shape")
        t = mine.detach().clone(memory_format=torch.contiguous_format)
        return t if device is None else t.to(device)
    raise Malformed("unknown node")
