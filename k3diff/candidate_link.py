"""The two sides of a candidate call: what runs the candidate (`CandidateHost`, in the candidate's
process) and what k3diff's judging code talks to (a link: `LocalLink` in this process, or
`k3diff.isolation.RemoteLink` over the socket to the child).

The judging process owns every tensor: it draws the weights and inputs, makes the output buffers
(k3diff.controls.make_calls), runs the reference and judges. The host only asks the backend what
it supports and provides, prepares it once per weight set (by a token the judging side assigns:
the weights travel once per set, `WeightTokens`), and runs it into the buffers it is given. What it
sends back is tensors and facts; the verdict is computed where it cannot reach.
"""
from __future__ import annotations

import time
import weakref
from collections import OrderedDict

import torch

from k3diff import caches, features, weight_guard
from k3diff.controls import run_candidate
from k3diff.distributed import bind_case
from k3diff.fatal import CRASH, CandidateFailed, describe
from k3diff.refusals import NO_STAGE, PREFIX
from k3diff.transfer import shared

KEEP_SETS = 8           # weight sets (and their prepared copies) a candidate process keeps


def failure_of(exc: BaseException, during: str) -> CandidateFailed:
    """The candidate's exception as the failure k3diff records: an ordinary exception in run() fails
    the case with its message; anything else (in prepare(), supports(), provides(), or SystemExit)
    is a crash before its verdict; out of memory is judged by size (k3diff.judge)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return CandidateFailed(f"{CRASH} the candidate raised {describe(exc)} before its verdict", oom=True)
    if during == "run" and isinstance(exc, Exception):
        text = getattr(exc, "verdict_error", None) or f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return CandidateFailed(text, crash=False)
    return CandidateFailed(f"{CRASH} the candidate raised {describe(exc)} before its verdict")


class CandidateHost:
    """The candidate's side: its backend, its weight sets by token, its prepared copies."""

    def __init__(self, backend, *, guard_weights: bool = False):
        self.backend = backend
        self.name = str(getattr(backend, "name", type(backend).__name__))
        # a process of its own holds its own copy of the smaller weights (k3diff.transfer): it says
        # whether the candidate wrote to them, as it says which output it rebound (a fact that can
        # only fail a case); in k3diff's process the judging side guards the tensors themselves
        self.guard_weights = guard_weights
        self._weights: dict = {}
        self._prepared: dict = {}

    def ask(self, case) -> dict:
        """Whether the candidate runs this case, and what it provides (its own answers, asked per case)."""
        b, stage = self.backend, case.stage
        skip = None
        if stage not in getattr(b, "stages", (stage,)):
            skip = f"backend {self.name!r} {NO_STAGE}{stage!r}"
        else:
            unsupported = features.refusal(b, case)     # dims, and verify / FP8 (k3diff/features.py)
            if unsupported:
                skip = f"backend {self.name!r} {PREFIX}{unsupported}"
        provides = [] if skip else sorted(str(p) for p in b.provides(stage))
        return {"skip": skip, "provides": provides, "deterministic": bool(getattr(b, "deterministic", True))}

    def forget(self, tokens) -> None:
        for t in tokens:
            self._weights.pop(t, None)
            for key in [k for k in self._prepared if k[0] == t]:
                del self._prepared[key]

    def run(self, case, cfg, token, weights, calls, provides) -> dict:
        """prepare() once per (weight set, stage), then the candidate into `calls`; the facts of
        k3diff.controls.run_candidate. The weights are sent with the first call of their set."""
        if weights is not None:
            self._weights[token] = weights
        weights = self._weights[token]
        key = (token, case.stage)
        bind_case(self.backend, case)               # a distributed candidate runs the case's layout
        start = time.perf_counter()
        if key not in self._prepared:
            self._prepared[key] = self.backend.prepare(cfg, case.stage, weights)
        prepared_s = time.perf_counter() - start    # for the phase clock only: where the time went
        guard = weight_guard.remember({k: v for k, v in weights.items() if not shared(v)}) if self.guard_weights else {}
        facts = run_candidate(self.backend, case.stage, cfg, self._prepared[key], calls, set(provides))
        facts["prepare_s"] = prepared_s
        facts["weights_changed"] = weight_guard.changed(guard, weights) if guard else []
        facts["host_s"] = time.perf_counter() - start     # isolated: the round trip less this is transfer
        return facts


class WeightTokens:
    """The judging side's names for weight sets, so a set crosses to the candidate once. A token
    holds its tensors, so their ids (the key) cannot be reused while it lives. Cleared with the
    weight caches (k3diff.caches): the candidate is told to drop those sets with the next call."""

    def __init__(self):
        self._by_key: OrderedDict = OrderedDict()
        self._next = 0
        self.dropped: list = []
        ref = weakref.ref(self)
        caches.register(f"weight tokens {id(self)}", lambda: ref() and ref().clear())

    def token(self, weights: dict) -> tuple[int, bool]:
        key = tuple((k, id(v)) for k, v in sorted(weights.items()))
        if key in self._by_key:
            self._by_key.move_to_end(key)
            return self._by_key[key][0], False
        self._next += 1
        self._by_key[key] = (self._next, dict(weights))
        while len(self._by_key) > KEEP_SETS:
            self.dropped.append(self._by_key.popitem(last=False)[1][0])
        return self._next, True

    def clear(self) -> None:
        self.dropped += [t for t, _ in self._by_key.values()]
        self._by_key.clear()

    def reset(self) -> None:
        """A fresh candidate process: it holds nothing."""
        self._by_key.clear()
        self.dropped = []

    def undelivered(self, token: int | None, dropped: list) -> None:
        """A request the candidate's process could not receive: the sets it was to forget go with
        the next one, and the set it carried for the first time (`token`) is sent again."""
        self.dropped = list(dropped) + self.dropped
        for key, (t, _) in list(self._by_key.items()):
            if t == token:
                del self._by_key[key]

    def take_dropped(self) -> list:
        out, self.dropped = self.dropped, []
        return out


class LocalLink:
    """The candidate in this process (`--k3diff-isolate off`, mutant hunts, direct `check_case`
    calls): the same host and the same judging code as isolated, without the socket."""
    is_candidate_link = True

    def __init__(self, backend):
        self.backend = backend
        self.host = CandidateHost(backend)
        self.name = self.host.name
        self.batch_invariant = bool(getattr(backend, "batch_invariant", False))
        self.tokens = WeightTokens()

    def begin_case(self) -> None:
        pass

    def writable(self, weights: dict) -> dict:
        """The weights the candidate can write to: in this process, all of them."""
        return weights

    def ask(self, case) -> dict:
        try:
            return self.host.ask(case)
        except Exception as exc:  # noqa: BLE001 - the candidate's, not ours
            raise failure_of(exc, "ask") from None

    def run(self, case, cfg, weights, calls, provides) -> tuple[list, dict]:
        token, _ = self.tokens.token(weights)
        self.host.forget(self.tokens.take_dropped())
        try:
            facts = self.host.run(case, cfg, token, weights, calls, provides)
        except Exception as exc:  # noqa: BLE001 - SystemExit and Ctrl-C go on to k3diff.judge
            raise failure_of(exc, "run" if (token, case.stage) in self.host._prepared else "prepare") from None
        return calls, facts


_LOCAL: OrderedDict = OrderedDict()        # id(backend) -> (backend, its LocalLink): prepared copies kept
caches.register("local candidate links", _LOCAL.clear)


def link_for(candidate):
    """The link itself, or for a backend object the in-process link (one per backend, so its
    prepared weight sets last across cases)."""
    if getattr(candidate, "is_candidate_link", False):
        return candidate
    entry = _LOCAL.get(id(candidate))
    if entry is None or entry[0] is not candidate:
        entry = _LOCAL[id(candidate)] = (candidate, LocalLink(candidate))
        while len(_LOCAL) > KEEP_SETS:
            _LOCAL.popitem(last=False)
    _LOCAL.move_to_end(id(candidate))
    return entry[1]
