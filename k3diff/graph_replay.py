"""Schedule `graph`: the candidate captured into a CUDA graph once per shape and replayed, the way a
serving engine runs a decode step (k3diff/schedule.py says why).

Per (candidate, stage, prepared weights, input and output shapes): static input and output buffers
are filled with a decoy of the case's inputs (its floating inputs negated and its rows' slots and
cache lengths rolled by one row, so still a valid step; other integers and states as they are),
the candidate runs once eagerly on a side stream (the
warm-up, as PyTorch's and vLLM's capture do), then once under `torch.cuda.graph`. Every later run of
that shape, the first one included, copies the step's inputs into the static buffers, poisons the
static outputs, replays the graph and hands back copies of what it wrote. Because the capture saw
the decoy and every replay sees other values, a graph that froze a host-side decision, cached an
input or an output by identity, or wrote into a buffer it does not own at capture time gives other
bits than the eager run, and a multi-step case replays the same graph step after step.

A candidate that cannot be captured (a host read such as `.item()` or `.tolist()` inside `run`, an
allocation the graph cannot hold) gives {"error": "CUDA graph capture failed: ..."}: a named failure
with a seed, not a crash of the judge. A capture that fails part way leaves PyTorch's default
CUDA generator in its capture mode, so the process's next CUDA random draw fails ("Offset
increment outside graph capture"): the generator's state from before the capture is put back.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from k3diff import caches
from k3diff.stages import STATE

_GRAPHS: OrderedDict = OrderedDict()
_KEEP = 4             # graphs kept (each holds its own memory pool)
INT_POISON = -7       # as k3diff.controls poisons integer outputs
# integer inputs with one entry per row whose rows may be permuted and still make a valid step
# (distinct live slots stay distinct; each cache length stays within the case's capacity): the
# decoy rolls them, so a host-side value derived from them and frozen at capture shows
ROLLED = ("state_idx", "cache_lens")
caches.register("captured graphs", _GRAPHS.clear)


def _key(backend, stage, prepared, inputs: dict, out: dict) -> tuple:
    def shape(v):
        return ("t", tuple(v.shape), str(v.dtype)) if torch.is_tensor(v) else ("v", repr(v))
    return (id(backend), stage, id(prepared),
            tuple(sorted((k, shape(v)) for k, v in inputs.items())),
            tuple(sorted((k, shape(v)) for k, v in out.items())))


def decoy(stage: str, inputs: dict) -> dict:
    """Static buffers holding other values than any real step: floating inputs that are not state
    negated (a valid step: other routes, other scores), the ROLLED integers' rows rolled by one
    (other rows live, other lengths), everything else copied."""
    out = {}
    for k, v in inputs.items():
        if not torch.is_tensor(v):
            out[k] = v
        elif v.dtype.is_floating_point and k not in STATE[stage]:
            out[k] = (-v).contiguous() if v.is_contiguous() else torch.neg(v)
        elif k in ROLLED and v.dim() == 1:
            out[k] = torch.roll(v, 1).contiguous()
        else:
            out[k] = v.clone()
    return out


def _generator(device):
    """PyTorch's default CUDA generator of `device`, or None (no CUDA, an older PyTorch)."""
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        gen = torch.cuda.default_generators[index]
        gen.clone_state, gen.graphsafe_set_state       # noqa: B018 - both needed by _restore
        return gen
    except Exception:  # noqa: BLE001 - nothing to guard
        return None


def _restore(gen, saved) -> None:
    """Point `gen` at `saved` (a clone of its state taken before the capture): the state a failed
    capture left in capture mode is dropped, the seed and offset are as before it."""
    if gen is not None and saved is not None:
        try:
            gen.graphsafe_set_state(saved)
        except Exception:  # noqa: BLE001 - the next random draw names what is still wrong
            pass


def _poison(out: dict) -> None:
    for buf in out.values():
        buf.fill_(float("nan") if buf.dtype.is_floating_point else INT_POISON)


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:240]


def _capture(backend, stage, cfg, prepared, inputs, alloc):
    static_in = decoy(stage, inputs)
    static_out = alloc(static_in, "nan")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):              # the warm-up: lazy allocations, autotuning, streams
        backend.run(stage, cfg, prepared, static_in, static_out)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    device = next((v.device for v in static_in.values() if torch.is_tensor(v)), torch.device("cuda"))
    gen = _generator(device)
    saved = gen.clone_state() if gen is not None else None
    try:
        with torch.cuda.graph(graph):
            backend.run(stage, cfg, prepared, static_in, static_out)
    except BaseException:
        _restore(gen, saved)
        raise
    return graph, static_in, static_out


def replay(backend, stage, cfg, prepared, inputs: dict, alloc) -> dict:
    """{"outputs": {name: tensor}, "states": {name: tensor}} of one replay with `inputs` copied in,
    or {"error": line} when the capture failed."""
    probe_out = alloc(inputs, "nan")
    key = _key(backend, stage, prepared, inputs, probe_out)
    entry = _GRAPHS.get(key)
    if entry is None:
        try:
            graph, static_in, static_out = _capture(backend, stage, cfg, prepared, inputs, alloc)
        except Exception as exc:  # noqa: BLE001 - the candidate's capture failure is the finding
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a sticky error: the isolation names the crash
                pass
            return {"error": f"CUDA graph capture failed: {_first_line(exc)}"}
        # the entry holds backend and prepared, so the ids in its key stay theirs
        entry = (graph, static_in, static_out, backend, prepared)
        _GRAPHS[key] = entry
        while len(_GRAPHS) > _KEEP:
            _GRAPHS.popitem(last=False)
    _GRAPHS.move_to_end(key)
    graph, static_in, static_out = entry[:3]
    for k, v in inputs.items():
        if torch.is_tensor(v):
            static_in[k].copy_(v)
    _poison(static_out)
    graph.replay()
    torch.cuda.synchronize()
    return {"outputs": {k: v.clone() for k, v in static_out.items()},
            "states": {k: static_in[k].clone() for k in STATE[stage] if k in static_in}}
