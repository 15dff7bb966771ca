"""megakernel-ep's exchange through peer device memory: ranks of one host write their
rows straight into the receiving rank's device buffer and the y rows straight back, instead of
torch.distributed's all_to_all_single (over gloo, as ranks sharing a GPU must use, every row
goes through a host copy twice per exchange).

Buffers: each rank allocates one device buffer (the rows it receives, their expert ids, and
the y rows of its own routes coming back) and shares it by its CUDA IPC handle
(torch.multiprocessing's reduce_tensor, gathered with all_gather_object over the rank's group);
each rank maps every peer's and keeps the mappings for the exchange's lifetime. Every rank
sizes its buffer alike from the step's count matrix (which every rank holds), so a step that
needs more rows grows them all in the same collective.

Layout (`offsets`): a receiver's rows are what all_to_all_single gives it (by source rank, each
block in its sender's order) less its own block, whose rows never leave their rank; the rows
coming back, likewise by owner rank (`offsets` of the transposed counts).

Fences: the counts go over the group (small); a writer's device copies are complete (its
stream synchronised) before it enters a barrier of the group, and a buffer is read only after
that barrier. A buffer is written for step n + 1 only after its owner passed step n's last
barrier, which follows its reads of step n. Ranks on several GPUs of a host use the same code
(the mapping gives peer access); not yet run so.

CPU ranks (tests only; `choose` never picks this for them): the buffer is a shared file
mapping, so CI runs the same offsets, growth and fences on gloo ranks.
"""
from __future__ import annotations

import contextlib
import os
import socket
import tempfile

import torch
import torch.distributed as dist

FLOOR = 64          # rows of the smallest buffer; doubled until a step's rows fit


def offsets(counts) -> list:
    """off[s][d]: the first row of sender s's block in receiver d's buffer, where counts[s][d]
    is the rows s sends d: the blocks of every rank but d, by source rank (all_to_all_single's
    order with d's own block left out)."""
    W = len(counts)
    return [[sum(counts[q][d] for q in range(s) if q != d) for d in range(W)] for s in range(W)]


def transposed(counts) -> list:
    """The counts of the way back: owner d returns counts[s][d] rows to home s."""
    return [list(c) for c in zip(*counts)]


def remote(counts, rank: int, incoming: bool) -> int:
    """Rows `rank` receives from the other ranks (incoming) or sends them."""
    W = len(counts)
    return sum(counts[q][rank] if incoming else counts[rank][q] for q in range(W) if q != rank)


def choose(how: str, peers, backend: str) -> str:
    """"ipc" or "dist" (the same on every rank): `how` the setting (config.EP_EXCHANGES),
    `peers` each rank's (host, device type), `backend` the group's. IPC needs every rank on a
    CUDA device of one host; with NCCL the group already moves device memory, so "auto" keeps
    it. ValueError (one line) when "ipc" is asked for where it cannot run."""
    if how == "dist":
        return "dist"
    if backend != "nccl" and all(t == "cuda" for _, t in peers) and len({h for h, _ in peers}) == 1:
        return "ipc"
    if how == "ipc":
        raise ValueError("MEGAKERNEL_EP_EXCHANGE=ipc needs every rank on a CUDA device of one host "
                         f"and a group other than NCCL (here: {backend}, "
                         f"{sorted({t for _, t in peers})}, {len({h for h, _ in peers})} host(s))")
    return "dist"


def pick(how: str, device, group) -> str:
    """choose() over the group: a collective, so every rank calls it at the same point."""
    if how == "dist":
        return "dist"
    peers = [None] * dist.get_world_size(group)
    dist.all_gather_object(peers, (socket.gethostname(), torch.device(device).type), group=group)
    return choose(how, peers, dist.get_backend(group))


class IpcExchange:
    """One rank's side of the exchange; rows of r bf16 values. A step calls counts, dispatch,
    fence, received, combine (or combine_block per block of blocks()), fence, returned in that
    order on every rank (ep.py)."""

    def __init__(self, group, rank: int, world: int, device, r: int):
        self.group, self.rank, self.world, self.r = group, rank, world, r
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        # the copies to the peers run here, so the rank's own experts overlap them
        self.side = torch.cuda.Stream(self.device) if self.cuda else None
        self.cap = 0
        self.bufs: list = []         # per rank: its buffer's views (our own, the peers' mapped)
        self._own = None

    # -- the counts, and the buffers sized for them
    def counts(self, send_counts: torch.Tensor) -> list:
        """counts[s][d] of every rank (one all_gather of W ints per rank); grows the buffers
        first when this step's rows do not fit (every rank decides alike from the matrix)."""
        mine = send_counts.to("cpu", torch.int64)
        rows = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine, group=self.group)
        C = [t.tolist() for t in rows]
        need = max(max(remote(C, d, True), remote(C, d, False)) for d in range(self.world))
        if need > self.cap or not self.bufs:
            self._grow(need)
        return C

    def _grow(self, need: int) -> None:
        cap = FLOOR
        while cap < need:
            cap *= 2
        nbytes = 4 * cap * self.r + 8 * cap            # rows in, y rows back (bf16), ids (int64)
        own, handle = self._allocate(nbytes)
        handles = [None] * self.world
        dist.all_gather_object(handles, handle, group=self.group)
        raw = [own if s == self.rank else _open(h) for s, h in enumerate(handles)]
        dist.barrier(group=self.group)                 # every peer has mapped ours
        if handle[0] == "file":
            os.unlink(handle[1])                       # the mappings outlive the name
        self.bufs = [_views(b, cap, self.r) for b in raw]
        self.cap, self._own = cap, own

    def _allocate(self, nbytes: int):
        if self.cuda:
            from torch.multiprocessing.reductions import reduce_tensor

            buf = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)
            torch.cuda.current_stream(self.device).synchronize()     # zeroed before a peer maps it
            return buf, ("cuda", reduce_tensor(buf))
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        fd, path = tempfile.mkstemp(prefix=f"megakernel-ep-r{self.rank}-", dir=folder)
        os.close(fd)
        return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8), ("file", path, nbytes)

    # -- the two ways
    @contextlib.contextmanager
    def _on_side(self, *tensors):
        """Device copies on the side stream after the caller's work so far (which made `tensors`)."""
        if not self.cuda:
            yield
            return
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        for t in tensors:
            t.record_stream(self.side)                 # not reused before the copies are done
        with torch.cuda.stream(self.side):
            yield

    def dispatch(self, C: list, rows: torch.Tensor, ids: torch.Tensor) -> None:
        """This rank's rows (and expert ids), sorted by destination, each remote block written
        into its receiver's buffer. Asynchronous on a GPU: complete at the next fence()."""
        me, off = self.rank, offsets(C)
        with self._on_side(rows, ids):
            a = 0
            for d in range(self.world):
                n = C[me][d]
                if n and d != me:
                    self._put(self.bufs[d], off[me][d], rows[a:a + n], ids[a:a + n])
                a += n

    def _put(self, peer: dict, at: int, rows: torch.Tensor, ids: torch.Tensor) -> None:
        peer["rows"][at:at + rows.shape[0]].copy_(rows)
        peer["ids"][at:at + ids.shape[0]].copy_(ids)

    def fence(self) -> None:
        """Every rank's writes so far are in place: this rank's copies done, then a barrier."""
        if self.cuda:
            self.side.synchronize()     # it waited for the caller's stream before its copies
        dist.barrier(group=self.group)

    def received(self, C: list):
        """(rows [M, r] bf16, ids [M] int64) the other ranks sent this one: views of its buffer,
        valid until the next step's dispatch."""
        n = remote(C, self.rank, True)
        b = self.bufs[self.rank]
        return b["rows"][:n], b["ids"][:n]

    def blocks(self, C: list) -> list:
        """(source rank, first row, rows, place back) of each block received()'s rows hold, in
        buffer order; the place back is where its y rows go in the source's buffer."""
        me, off, back = self.rank, offsets(C), offsets(transposed(C))
        return [(s, off[s][me], C[s][me], back[me][s]) for s in range(self.world)
                if s != me and C[s][me]]

    def combine_block(self, s: int, at: int, y: torch.Tensor) -> None:
        """y: the y rows of source s's block, written into home s's buffer at `at` (blocks()).
        Asynchronous on a GPU (the side stream, so the experts of the next block overlap it):
        complete at the next fence()."""
        with self._on_side(y):
            self.bufs[s]["back"][at:at + y.shape[0]].copy_(y)

    def combine(self, C: list, y: torch.Tensor) -> None:
        """y [M, r]: the y of all received()'s rows, each block back to its home (combine_block)."""
        for s, o, n, at in self.blocks(C):
            self.combine_block(s, at, y[o:o + n])

    def returned(self, C: list) -> torch.Tensor:
        """The y rows of this rank's remote routes, in its send order less its own block."""
        return self.bufs[self.rank]["back"][:remote(C, self.rank, False)]

    def close(self) -> None:
        """Unmap the peers' buffers, then wait for every rank to have done so: a buffer's owner
        must outlive the mappings of it (torch warns when an IPC producer exits first)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.bufs, self._own, self.cap = [], None, 0
        dist.barrier(group=self.group)


def _open(handle):
    """A peer's buffer, mapped into this process."""
    if handle[0] == "cuda":
        rebuild, args = handle[1]
        return rebuild(*args)
    return torch.from_file(handle[1], shared=True, size=handle[2], dtype=torch.uint8)


def _views(buf: torch.Tensor, cap: int, r: int) -> dict:
    rb = 2 * cap * r
    return {"rows": buf[:rb].view(torch.bfloat16).view(cap, r),
            "back": buf[rb:2 * rb].view(torch.bfloat16).view(cap, r),
            "ids": buf[2 * rb:2 * rb + 8 * cap].view(torch.int64)}
