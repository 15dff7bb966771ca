"""Compare one candidate tensor with the float64 oracle, calibrated by the bf16 baseline.

The verdict rule and its budgets live in `k3diff.budgets`; this module measures and locates.
Besides the pass/fail bound it reports DeepGEMM's similarity `1 - 2*sum(xy)/sum(x^2+y^2)`, the worst
error in ULPs of the output dtype, and the share of elements outside the element-wise form of the
rule, so a reviewer sees how far from the line a result is, not only which side.

An accumulated tensor (a GEMV, the attention sums, a norm, the delta rule) comes with the
reference's contraction over absolute values A = Σ_k |a_k||b_k| (reference/numerics.py,
"magnitudes"); its bound then grows element by element by c·u·A (Higham's a-priori bound, u the
f32 unit roundoff, c per tensor in k3diff.budgets), and the report carries its accuracy class,
max |cand − ref| / (u·A) over the elements, so accuracy is visible while a result passes.

A tensor stored in bf16 or fp16 is judged whole too: its L2 error against the baseline's
(k3diff.budgets.L2_RTOL; at a multi-step case's later steps L2_RTOL_CHAINED), which a uniform error
under every element's bound does not pass.

One implementation measures every tensor (`measure_numeric`, many tensors of one dtype at once);
the one-tensor `measure` is that with one tensor, so the rule exists once.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from k3diff.budgets import U_ACCUM, Budget, chained

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
    # max over elements of |cand - ref| / (u * sum|a||b|): the error in units of the accumulation's own
    # a-priori bound (u = 2^-24); None when the tensor is not an accumulation or its class would not
    # measure the accumulation (k3diff.budgets.Budget.classed: bf16 storage, rounded inputs)
    accuracy: float | None = None
    # on a failing tensor only: |cand - ref| max-pooled to at most 64x64 (rows: tokens), for reports;
    # never in to_dict(), so verdicts and seed files stay as they were
    error_map: list | None = field(default=None, repr=False, compare=False)
    # ||cand - ref||_2 / ||base - ref||_2 of a tensor stored in bf16 or fp16, where the output's own
    # rounding dominates the baseline's error, so a correct candidate sits near 1 (None: another
    # dtype, where the baseline's error is tiny and a summation order alone moves it 2-4x, or no
    # baseline error). The whole-tensor rule (k3diff.budgets.L2_RTOL) judges ||cand - ref||_2
    # against l2_bound at every step (a chained step by budgets.L2_RTOL_CHAINED); None: no ratio.
    # In the results file as `l2` (k3diff.results); not in to_dict(), like error_map
    l2_ratio: float | None = field(default=None, compare=False)
    l2_err: float | None = field(default=None, compare=False)
    l2_bound: float | None = field(default=None, compare=False)

    @property
    def ratio(self) -> float:
        """How much of the budget the worst element used, or the whole tensor where the whole-tensor
        rule judges it and used more (> 1 fails)."""
        share = self.max_err / self.bound if self.bound > 0 else (0.0 if self.max_err == 0 else float("inf"))
        return share if self.l2_bound is None else max(share, self.l2_err / self.l2_bound)

    def line(self) -> str:
        status = "ok" if self.ok else "FAIL"
        loc = f" at token {self.where[0]} index {list(self.where[1:])}" if self.where else ""
        if self.note:
            return f"{status} {self.stage}/{self.tensor}: {self.note}{loc}"
        acc = "" if self.accuracy is None else f", accuracy {self.accuracy:.3g} u·Σ|ab|"
        return (f"{status} {self.stage}/{self.tensor}: max|err| {self.max_err:.3g} vs bound {self.bound:.3g} "
                f"(baseline {self.base_err:.3g}, atol {self.atol:.3g}{acc}){loc}; "
                f"cand {self.cand_value:.6g} ref {self.ref_value:.6g}; {self.worst_ulps:.1f} ulp; "
                f"sim {self.similarity:.2e}; {100 * self.frac_outside:.3f}% outside{self._whole()}")

    def _whole(self) -> str:
        """The whole-tensor rule's figure, where the tensor has one (bf16 / fp16)."""
        if self.l2_ratio is None:
            return ""
        if self.l2_err:               # the bound in the baseline's L2 errors: bound / (err / ratio)
            tail = f" (bound {self.l2_bound * self.l2_ratio / self.l2_err:.3g}x)"
        else:
            tail = ""
        return f"; L2 {self.l2_ratio:.2f}x the baseline's{tail}"

    def to_dict(self) -> dict:
        # the fields by hand: dataclasses.asdict deep-copies every value (a tenth of a small case)
        d = {f.name: getattr(self, f.name) for f in _FIELDS}
        d["where"] = list(self.where)
        return d


_FIELDS = tuple(f for f in fields(TensorReport) if f.name not in ("error_map", "l2_ratio", "l2_err", "l2_bound"))


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
            budget: Budget, dtype: torch.dtype | None = None, absdot: torch.Tensor | None = None) -> TensorReport:
    """Apply the error rule to one tensor. `dtype` is the candidate's storage dtype; `absdot` the
    reference's Σ|a||b| of an accumulated tensor (None: not one). (Many tensors at once:
    `k3diff.comparisons.compare_many`, the same verdicts.)"""
    m = measure(stage, name, cand, ref, base, budget, dtype, absdot)
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


def measure(stage, name, cand, ref, base, budget: Budget, dtype=None, absdot=None):
    """A finished TensorReport where nothing needs measuring, else a Pending: a bitwise check, or
    `measure_numeric` of this one tensor."""
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
    if not dtype.is_floating_point:
        absdot = None
    return measure_numeric([(stage, name, cand, ref, base, budget, dtype, absdot)], dtype)[0]


def measure_numeric(items, dtype) -> list[Pending]:
    """The error rule's numbers for several non-empty tensors of one storage dtype and device, each
    (stage, name, cand, ref, base, budget, dtype, absdot): their values concatenated, every
    element-wise step done once, each reduction per tensor as a row of a zero-padded
    [tensors, longest] matrix (zero is neutral for every reduction here: the maxima are of
    non-negative values, and the first maximum of a row is the tensor's own).

    Per element i of a tensor the bound is rtol·max|base − ref| + atol + c·u·A_i, with A the
    reference's Σ|a||b| (0 where the tensor is not an accumulation, c = budget.accum); the report
    names the element that used the largest share of its bound (for a tensor without A: the
    largest error, as the bound is one number)."""
    k = len(items)
    dev = items[0][2].device
    sizes = [it[2].numel() for it in items]
    longest = max(sizes)
    flat = lambda ts: torch.cat([t.reshape(-1).to(torch.float64) for t in ts]) if k > 1 else \
        ts[0].reshape(-1).to(torch.float64)                                  # noqa: E731
    c = flat([it[2] for it in items])
    r = flat([it[3] for it in items])
    b = flat([it[4] if it[4] is not None else it[3] for it in items])    # no baseline: its error is 0
    has_abs = [it[7] is not None for it in items]
    for it in items:
        if it[7] is not None and it[7].shape != it[3].shape:
            raise ValueError(f"{it[0]}/{it[1]}: Σ|a||b| has shape {tuple(it[7].shape)}, the tensor {tuple(it[3].shape)}")
    counts = torch.tensor(sizes, device=dev)
    start = torch.cumsum(counts, 0) - counts
    if k == 1:                           # one tensor: its row is the tensor itself
        row = torch.zeros((), dtype=torch.int64, device=dev)
        rows = lambda v: v.view(1, -1)                                       # noqa: E731
    else:
        # each element's tensor (output_size: no host sync to learn the length)
        row = torch.repeat_interleave(torch.arange(k, device=dev), counts, output_size=sum(sizes))
        at = row * longest + (torch.arange(c.numel(), device=dev) - start[row])

        def rows(v):
            out = torch.zeros((k * longest,), dtype=v.dtype, device=dev)
            out[at] = v
            return out.view(k, longest)

    finite = torch.isfinite(r)
    bad = ~torch.isfinite(c) & finite
    r0 = torch.where(finite, r, 0.0)
    c0 = torch.where(finite, c, 0.0)
    err = (c0 - r0).abs()
    base_err_el = (torch.nan_to_num(torch.where(finite, b, 0.0), nan=0.0) - r0).abs()
    per_tensor_max = lambda v: rows(v).amax(1)                             # noqa: E731
    f64 = dict(dtype=torch.float64, device=dev)
    if dtype.is_floating_point:
        rounded, top = noise_floor_parts(r0, dtype, per_tensor_max)
        floor = noise_floor_from(rounded, top, dtype, per_tensor_max, lambda v: v[row])
        unit = ulp(r0, dtype)
        ulps = err / unit
    else:                                # integers: no rounding noise, errors in units of 1
        floor, ulps, unit = torch.zeros(k, **f64), err, torch.zeros_like(err)
    atol = torch.tensor([it[5].atol_mult for it in items], **f64) * floor
    rtol = torch.tensor([it[5].rtol for it in items], **f64)
    base_err = rows(base_err_el).amax(1)
    outside_at = atol[row] + rtol[row] * base_err_el
    scalars = [rows(bad.to(torch.float64)).sum(1), base_err, atol]
    if any(has_abs):
        A = flat([it[7] if it[7] is not None else torch.zeros_like(it[3], dtype=torch.float64) for it in items])
        A = torch.where(finite, torch.nan_to_num(A, nan=0.0), 0.0)
        cu = torch.tensor([it[5].accum * U_ACCUM if h else 0.0 for it, h in zip(items, has_abs)], **f64)[row]
        bound_el = (rtol * base_err + atol)[row] + cu * A
        key = torch.where(torch.tensor(has_abs, device=dev)[row], err / bound_el, err)
        # units of u·A; an exact zero of the reference (A = 0) may only be met exactly
        acc = torch.where(A > 0, err / (U_ACCUM * A), torch.where(err > 0, float("inf"), 0.0))
        outside_at = outside_at + cu * A
        over = rows((err > bound_el).to(torch.float64)).sum(1)
    else:
        bound_el, key, acc, over = None, err, None, None
    key_rows = rows(key)
    flat_idx = key_rows.argmax(1)                                          # the first maximum, as argmax
    pick = start + flat_idx
    outside = err > outside_at
    scalars += [flat_idx.to(torch.float64), err[pick], rows(c0 * c0 + r0 * r0).sum(1), rows(c0 * r0).sum(1),
                rows(ulps).amax(1), rows(outside.to(torch.float64)).sum(1) / counts,
                c0[pick], r0[pick]]
    if bound_el is not None:
        scalars += [bound_el[pick], rows(acc).amax(1), over]
    # last, whatever came before: the squared L2 errors of the candidate and the baseline, and of
    # the output dtype's own rounding (ulp / sqrt(12) an element: the whole-tensor rule's floor)
    b0 = torch.where(finite, torch.nan_to_num(b, nan=0.0), 0.0)
    scalars += [rows((c0 - r0) ** 2).sum(1), rows((b0 - r0) ** 2).sum(1), rows(unit * unit).sum(1) / 12.0]
    scalars = torch.stack(scalars, dim=1)                                  # [k, 14 or 17]
    # the class is reported where it measures the accumulation itself (Budget.classed: operands the
    # reference shares, stored in f32); a bf16-stored tensor's error is its own rounding, 2^15·|y|/A
    # units and more, whatever the accumulation did
    classed = [dtype == torch.float32 and it[5].classed for it in items]
    out = []
    for j, (stage, name, cand, ref, _, budget, _, _) in enumerate(items):
        lo, n = sum(sizes[:j]), sizes[j]
        piece = lambda v, lo=lo, n=n, shape=cand.shape: v[lo:lo + n].view(shape)   # noqa: E731
        out.append(Pending(scalars[j], lambda values, stage=stage, name=name, budget=budget, shape=cand.shape,
                           piece=piece, accumulated=has_abs[j], cls=classed[j]: numeric_report(
                               stage, name, budget, shape, values, lambda: piece(err),
                               lambda: non_finite_report(stage, name, piece(c), piece(r), piece(bad)),
                               accumulated, cls, dtype in (torch.bfloat16, torch.float16))))
    return out


def numeric_report(stage, name, budget: Budget, shape, values, err, non_finite, accumulated=False,
                   classed=False, l2=False) -> TensorReport:
    """The error rule's verdict from a comparison's numbers, in this order: the count of non-finite
    candidate values where the reference is finite, max baseline error, atol, the reported
    element's flat index, its error, sum(c^2 + r^2), sum(c r), worst ulps, share outside, the
    reported element's candidate and reference values; for an accumulated tensor then the bound at
    that element, the accuracy class and the count of elements over their bound; last the squared
    L2 errors of the candidate and of the baseline and the dtype's squared L2 rounding level. `err()` gives the
    |cand - ref| tensor for a failure's error map, `non_finite()` the report of a candidate with
    non-finite values where the reference is finite."""
    n_bad, base_err, atol, flat, max_err, denom, cross, ulps, frac, cand_value, ref_value = values[:11]
    if n_bad:
        return non_finite()
    flat = int(flat)
    similarity = 0.0 if denom == 0 else 1.0 - 2.0 * cross / denom
    cand_l2, base_l2, rounding_l2 = (float(v) ** 0.5 for v in values[-3:])
    l2_ratio = cand_l2 / base_l2 if l2 and base_l2 > 0 else None
    # the baseline is never credited with less error than the dtype's own rounding (a reference
    # that bf16 holds exactly would leave it none)
    # (a multi-step case's later steps by their own measured multiple: budgets.L2_RTOL_CHAINED)
    l2_mult = budget.l2_chained if chained(name) else budget.l2
    l2_bound = l2_mult * max(base_l2, rounding_l2) if l2_ratio is not None else None
    if accumulated:
        bound, accuracy, over = values[11:14]
        accuracy = accuracy if classed else None
        ok = over == 0
    else:
        bound, accuracy = budget.rtol * base_err + atol, None
        ok = max_err <= bound
    note = ""
    if ok and l2_bound is not None and cand_l2 > l2_bound:
        ok = False
        note = (f"whole-tensor error ||cand - ref||_2 {cand_l2:.3g} = {l2_ratio:.2f}x the baseline's "
                f"{base_l2:.3g} vs bound {l2_bound:.3g} ({l2_mult:g}x); the worst element "
                f"{max_err:.3g} is inside its bound {bound:.3g}")
    return TensorReport(stage, name, ok, max_err=max_err, bound=bound, base_err=base_err,
                        atol=atol, similarity=similarity, worst_ulps=ulps,
                        frac_outside=frac, where=_unravel(flat, shape),
                        cand_value=cand_value, ref_value=ref_value, note=note, accuracy=accuracy,
                        error_map=None if ok else error_map(err()), l2_ratio=l2_ratio,
                        l2_err=cand_l2 if l2_bound is not None else None, l2_bound=l2_bound)


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
