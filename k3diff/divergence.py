"""Compare one candidate tensor with the float64 oracle, calibrated by the bf16 baseline.

The verdict rule and its budgets live in `k3diff.budgets`; this module measures and locates.
Besides the pass/fail bound it reports DeepGEMM's similarity `1 - 2*sum(xy)/sum(x^2+y^2)`, the worst
error in ULPs of the output dtype, and the share of elements outside the element-wise form of the
rule, so a reviewer sees how far from the line a result is, not only which side.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from k3diff.budgets import Budget

_MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23, torch.float64: 52}


@dataclass
class TensorReport:
    stage: str
    tensor: str
    ok: bool
    max_err: float = 0.0
    bound: float = 0.0
    base_err: float = 0.0
    atol: float = 0.0
    similarity: float = 0.0      # DeepGEMM's 1 - 2xy/(x^2+y^2): 0 is identical
    worst_ulps: float = 0.0
    frac_outside: float = 0.0
    where: tuple = ()            # index of the worst element; where[0] is the token
    cand_value: float = 0.0
    ref_value: float = 0.0
    note: str = ""
    # on a failing tensor only: |cand - ref| max-pooled to at most 64x64 (rows: tokens), for reports;
    # never in to_dict(), so verdicts and seed files stay as they were
    error_map: list | None = field(default=None, repr=False, compare=False)

    @property
    def ratio(self) -> float:
        """How much of the budget the worst element used (> 1 fails)."""
        return self.max_err / self.bound if self.bound > 0 else (0.0 if self.max_err == 0 else float("inf"))

    def line(self) -> str:
        status = "ok" if self.ok else "FAIL"
        loc = f" at token {self.where[0]} index {list(self.where[1:])}" if self.where else ""
        if self.note:
            return f"{status} {self.stage}/{self.tensor}: {self.note}{loc}"
        return (f"{status} {self.stage}/{self.tensor}: max|err| {self.max_err:.3g} vs bound {self.bound:.3g} "
                f"(baseline {self.base_err:.3g}, atol {self.atol:.3g}){loc}; "
                f"cand {self.cand_value:.6g} ref {self.ref_value:.6g}; {self.worst_ulps:.1f} ulp; "
                f"sim {self.similarity:.2e}; {100 * self.frac_outside:.3f}% outside")

    def to_dict(self) -> dict:
        # the fields by hand: dataclasses.asdict deep-copies every value (a tenth of a small case)
        d = {f.name: getattr(self, f.name) for f in _FIELDS}
        d["where"] = list(self.where)
        return d


_FIELDS = tuple(f for f in fields(TensorReport) if f.name != "error_map")


def noise_floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """The rounding noise of `dtype` at the data's own magnitude: FlashAttention's atol,
    2 * max|(ref + c - c) - ref| computed in the output dtype, with c = 0.3 * max|ref| at EVERY
    magnitude (FlashAttention's c = 0.3 assumes data of magnitude ~1; kept as max(1, .) it gave
    outputs of magnitude 1e-3 a floor of ~8e-3, wide enough for an all-zeros output to pass).

    Never below one ulp at the data's magnitude (eps * max|ref|: on lucky data the measured floor
    can be 0), nor below the dtype's smallest normal number (a kernel that flushes subnormal
    results to zero, as GPUs do by default, is not wrong). All-zero reference data (max|ref| = 0)
    gets that smallest normal as its floor: zeros pass, any normal-range value fails."""
    if not dtype.is_floating_point or ref.numel() == 0:
        return 0.0
    return float(_noise_floor(ref, dtype))


def _noise_floor(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`noise_floor` as a float64 0-d tensor on ref's device, computed without a host sync (the
    same float64 operations, in the same order, as on the host)."""
    r, top = noise_floor_parts(ref, dtype, torch.max)
    return noise_floor_from(r, top, dtype, torch.max, lambda c: c)


def noise_floor_parts(ref: torch.Tensor, dtype: torch.dtype, top_of):
    """(ref in `dtype`, non-finite values zeroed; its max |value| in float64, by `top_of`)."""
    r = torch.nan_to_num(ref.to(dtype), nan=0.0, posinf=0.0, neginf=0.0)
    return r, top_of(r.abs()).to(torch.float64)


def noise_floor_from(r: torch.Tensor, top: torch.Tensor, dtype: torch.dtype, max_of, spread) -> torch.Tensor:
    """The floor from noise_floor_parts; `max_of` reduces to one max per tensor and `spread` puts
    each tensor's c on its elements (identities for one tensor: k3diff.comparisons does many)."""
    fi = torch.finfo(dtype)
    c = spread((0.3 * top).to(dtype))                           # c itself in the output dtype
    moved = max_of(((r + c) - c - r).abs()).to(torch.float64)
    measured = 2.0 * torch.nan_to_num(moved, nan=0.0, posinf=0.0)   # r + c may overflow at the top
    return torch.maximum(torch.maximum(measured, fi.eps * top), torch.full_like(top, fi.tiny))


def ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bits = _MANTISSA_BITS.get(dtype, 52)
    mag = ref.abs().clamp_min(torch.finfo(dtype).tiny if dtype.is_floating_point else 1.0)
    return torch.exp2(torch.floor(torch.log2(mag)) - bits)


def error_map(err: torch.Tensor, size: int = 64) -> list:
    """|cand - ref| as rows (the first dim, tokens) by the rest flattened, max-pooled to at most
    size x size, 4 significant digits: small enough for a JSON line, the worst spot still visible."""
    e = err.detach().to(torch.float64).cpu()
    e = e.reshape(1, -1) if e.dim() <= 1 else e.reshape(e.shape[0], -1)
    shape = (min(size, e.shape[0]), min(size, e.shape[1]))
    pooled = torch.nn.functional.adaptive_max_pool2d(e[None, None], shape)[0, 0]
    return [[float(f"{v:.4g}") for v in row] for row in pooled.tolist()]


def _unravel(flat: int, shape) -> tuple:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx))


def compare(stage: str, name: str, cand: torch.Tensor, ref: torch.Tensor, base: torch.Tensor | None,
            budget: Budget, dtype: torch.dtype | None = None) -> TensorReport:
    """Apply the error rule to one tensor. `dtype` is the candidate's storage dtype. (Many tensors
    at once: `k3diff.comparisons.compare_many`, the same verdicts.)"""
    m = measure(stage, name, cand, ref, base, budget, dtype)
    if isinstance(m, Pending):
        m.values = m.scalars.tolist()
        return m.finish()
    return m


class Pending:
    """A comparison whose numbers are still on the device: `scalars` (float64, 1-D), read back
    into `values` (by compare or compare_many), then turned into the report by `finish`."""

    def __init__(self, scalars: torch.Tensor, finish):
        self.scalars, self._finish, self.values = scalars, finish, None

    def finish(self) -> TensorReport:
        return self._finish(self.values)


def settled(stage, name, cand, ref, budget: Budget) -> TensorReport | None:
    """The report of a comparison that needs no measuring (a shape mismatch, no elements), else None."""
    if tuple(cand.shape) != tuple(ref.shape):
        return TensorReport(stage, name, False, note=f"shape {tuple(cand.shape)} != reference {tuple(ref.shape)}")
    if cand.numel() == 0 and not budget.bitwise:
        return TensorReport(stage, name, True)
    return None


def measure(stage, name, cand, ref, base, budget: Budget, dtype=None):
    """A finished TensorReport where nothing needs measuring, else a Pending."""
    dtype = dtype or cand.dtype
    done = settled(stage, name, cand, ref, budget)
    if done is not None:
        return done
    if budget.bitwise:
        if cand.dtype != ref.dtype or cand.device.type == "cpu":   # torch.equal: one pass, no mask
            return _bitwise(stage, name, cand, ref)
        differ = (_bits(cand) != _bits(ref)).sum().to(torch.float64).reshape(1)
        return Pending(differ, lambda v: (TensorReport(stage, name, True, note="bitwise equal") if v[0] == 0
                                          else _bitwise(stage, name, cand, ref)))
    c = cand.to(torch.float64)
    r = ref.to(torch.float64)
    # a non-finite candidate value where the reference is finite fails at once: it is either a
    # NaN the kernel made or a NaN-poisoned element it never wrote (counted with the other numbers,
    # the report's details only then)
    finite = torch.isfinite(r)
    bad = ~torch.isfinite(c) & finite
    r0 = torch.where(finite, r, 0.0)
    c0 = torch.where(finite, c, 0.0)
    err = (c0 - r0).abs()
    if base is not None:
        b0 = torch.where(finite, base.to(torch.float64), 0.0)
        b0 = torch.nan_to_num(b0, nan=0.0)
        base_err_el = (b0 - r0).abs()
    else:
        base_err_el = torch.zeros_like(r0)
    # every number of the report computed where the tensors live, read back with the others
    zero = torch.zeros((), dtype=torch.float64, device=r0.device)
    base_err = base_err_el.max()
    atol = budget.atol_mult * _noise_floor(r0, dtype) if dtype.is_floating_point else zero
    flat = err.flatten().argmax()
    ulps = (err / ulp(r0, dtype)).max() if dtype.is_floating_point else err.max()
    outside = err > (atol + budget.rtol * base_err_el)
    scalars = torch.stack([
        bad.sum().to(torch.float64), base_err, atol, flat.to(torch.float64), err.flatten()[flat],
        (c0 * c0 + r0 * r0).sum(), (c0 * r0).sum(), ulps, outside.double().mean(), c0.flatten()[flat],
        r0.flatten()[flat]])
    return Pending(scalars, lambda values: numeric_report(stage, name, budget, c.shape, values, lambda: err,
                                                          lambda: non_finite_report(stage, name, c, r, bad)))


def numeric_report(stage, name, budget: Budget, shape, values, err, non_finite) -> TensorReport:
    """The error rule's verdict from a comparison's numbers, in this order: the count of non-finite
    candidate values where the reference is finite, max baseline error, atol, the worst element's
    flat index, its error, sum(c^2 + r^2), sum(c r), worst ulps, share outside, the worst
    element's candidate and reference values. `err()` gives the |cand - ref| tensor for a
    failure's error map, `non_finite()` the report of a candidate with non-finite values where
    the reference is finite."""
    n_bad, base_err, atol, flat, max_err, denom, cross, ulps, frac, cand_value, ref_value = values
    if n_bad:
        return non_finite()
    flat = int(flat)
    bound = budget.rtol * base_err + atol
    similarity = 0.0 if denom == 0 else 1.0 - 2.0 * cross / denom
    ok = max_err <= bound
    return TensorReport(stage, name, ok, max_err=max_err, bound=bound, base_err=base_err,
                        atol=atol, similarity=similarity, worst_ulps=ulps,
                        frac_outside=frac, where=_unravel(flat, shape),
                        cand_value=cand_value, ref_value=ref_value,
                        error_map=None if ok else error_map(err()))


def non_finite_report(stage, name, c, r, bad) -> TensorReport:
    """The failure of a candidate with non-finite values where the reference is finite."""
    flat = int(bad.flatten().nonzero()[0])
    return TensorReport(stage, name, False, where=_unravel(flat, c.shape), cand_value=float(c.flatten()[flat]),
                        ref_value=float(r.flatten()[flat]), error_map=error_map(bad.double()),
                        note=f"{int(bad.sum())} non-finite value(s) where the reference is finite "
                             "(NaN made by the kernel, or an element it never wrote)")


def _bits(t: torch.Tensor) -> torch.Tensor:
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(view)


def _bitwise(stage, name, cand, ref) -> TensorReport:
    if cand.dtype != ref.dtype:
        return TensorReport(stage, name, False, note=f"dtype {cand.dtype} != expected {ref.dtype} for a bitwise check")
    cb, rb = _bits(cand), _bits(ref)
    if torch.equal(cb, rb):             # one pass, no mask: the common case
        return TensorReport(stage, name, True, note="bitwise equal")
    diff = cb != rb
    flat = int(diff.flatten().nonzero()[0])
    return TensorReport(stage, name, False, where=_unravel(flat, cand.shape), error_map=error_map(diff.double()),
                        cand_value=float(cand.flatten()[flat].double()), ref_value=float(ref.flatten()[flat].double()),
                        note=f"{int(diff.sum())} element(s) differ bitwise, must be bit-exact")
