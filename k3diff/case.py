"""A Case: a small frozen, JSON-serialisable description of one differential check.

A case holds no tensors. Everything (weights, inputs, caches, states) is rebuilt from it by
`k3diff.materialize`, bit for bit on every machine, so a case written to a seed file is a complete
reproduction of a failure.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field

from k3diff import ep_config, exit_codes, schedule, verify_dims
from k3diff.stages import STAGES
from reference.config import ConfigError, K3Config, PRESETS, preset

# what a case's numbers mean: 1 drew every input on the CPU; 2 draws a GPU case's caches and states
# on its GPU (k3diff.materialize.inputs_draw_on); 3 draws its weights, caches and states with
# reference.counter_draw on the device it runs on: the same bits on every device, so a seed
# recorded on a GPU replays bit for bit on the CPU. Every version replays as it was drawn.
CASE_VERSION = 3
CASE_VERSIONS = (1, 2, 3)
SEED_LIMIT = 1 << 63

# high_ids: every token routes among the ids past the route kernels' 256-expert edges
# and E - 1 (k3diff.routing.apply_routing); appended, so a seed's mode keeps its meaning
ROUTING_MODES = ("natural", "skewed", "hot", "forced", "dropped", "ties", "near_tie", "high_ids")
VALUE_DISTS = ("plain", "outliers", "large", "tiny")
EXPERT_FORMATS = ("bf16", "mxfp4")


@functools.lru_cache(maxsize=256)
def _config(name: str, overrides: tuple, types: tuple) -> K3Config:
    """A case's config, built (and validated) once per (preset, overrides): K3Config is frozen.
    `types` keeps 4 and 4.0 apart (equal as keys, but only one is a valid top_k)."""
    cfg = preset(name)
    return cfg.replace(**dict(overrides)) if overrides else cfg


class CaseError(ValueError):
    """A seed file or case description that cannot be used; the message is one line."""
    exit_code = exit_codes.SEED


@dataclass(frozen=True)
class Case:
    stage: str
    preset: str = "tiny"
    overrides: tuple = ()                 # ((field, value), ...) applied to the preset
    batch: int = 1
    cache_lens: tuple = ()                # mla / layer-on-mla: L_b per sequence
    n_slots: int = 0                      # kda / layer-on-kda: size of the state pool (slot 0 = null)
    state_idx: tuple = ()                 # kda: slot of each row; <= 0 is a null (padding) row
    layer_idx: int = 1                    # layer stage (and which weights a layer draws)
    routing: str = "natural"
    expert_format: str = "bf16"
    value_dist: str = "plain"
    weight_seed: int = 0                  # weights depend only on (dims, weight_seed, format, layer)
    seed: int = 0                         # inputs, caches, states and routing tweaks
    steps: int = 1                        # consecutive decode steps on the same state
    ep_ranks: int = 0                     # expert parallelism (k3diff/ep_config.py); 0: one device
    ep_placement: str = ""
    ep_owners: tuple = ()
    # speculative verify steps and the FP8 cache (k3diff/verify_dims.py); left out of a seed at
    # their defaults, so a decode case's JSON is what it was
    widths: tuple = ()                    # W_b per sequence (1..8); empty: a decode step
    accepted: tuple = ()                  # accepted counts, steps x batch; empty: all
    cache_format: str = "bf16"            # mla / layer-on-mla: bf16 | fp8
    scores: str = "natural"               # mla: the score distribution (k3diff/score_modes.py)
    schedule: str = ""                    # how the candidate runs besides eagerly (k3diff/schedule.py)
    version: int = field(default=CASE_VERSION, compare=False)

    # ---- derived ----
    def config(self) -> K3Config:
        return _config(self.preset, self.overrides, tuple(type(v) for _, v in self.overrides))

    @property
    def attention_kind(self) -> str | None:
        if self.stage in ("mla", "kda"):
            return self.stage
        if self.stage == "layer":
            return self.config().layer_kind(self.layer_idx)
        return None

    def label(self) -> str:
        """Short human description used in summaries and test ids."""
        bits = [self.stage, self.preset, f"B={self.batch}"]
        if self.overrides:
            bits.append(",".join(f"{k}={v}" for k, v in self.overrides))
        if self.stage == "layer":
            bits.append(f"layer={self.layer_idx}({self.attention_kind})")
        if self.stage in ("moe", "layer"):
            bits += [self.routing, self.expert_format]
        if self.cache_lens:
            shown = list(self.cache_lens[:4]) + (["..."] if len(self.cache_lens) > 4 else [])
            bits.append("L=" + ",".join(map(str, shown)))
        if self.steps > 1:
            bits.append(f"steps={self.steps}")
        bits += verify_dims.label_bits(self)
        bits += [self.value_dist, f"seed={self.seed}"] + ([ep_config.label(self)] if self.ep_ranks else [])
        bits += schedule.label(self)
        return " ".join(bits)

    # ---- validation ----
    def validate(self) -> "Case":
        def need(ok, why):
            if not ok:
                raise CaseError(f"invalid case: {why}")

        for name in ("batch", "n_slots", "layer_idx", "weight_seed", "seed", "steps"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool), f"{name} must be an integer, got {v!r}")
        for name in ("cache_lens", "state_idx", "widths", "accepted"):
            bad = [v for v in getattr(self, name) if not (isinstance(v, int) and not isinstance(v, bool))]
            need(not bad, f"{name} must hold integers, got {bad[0]!r}" if bad else "")
        for name in ("weight_seed", "seed"):
            need(0 <= getattr(self, name) < SEED_LIMIT, f"{name} must lie in [0, 2**63), got {getattr(self, name)}")
        need(0 <= self.n_slots <= 1 << 20, f"n_slots must lie in [0, 2**20], got {self.n_slots}")
        need(0 <= self.layer_idx < 1 << 20, f"layer_idx must be >= 0, got {self.layer_idx}")
        need(self.batch <= 1 << 20, f"batch {self.batch} is absurdly large")
        need(self.steps <= 1 << 10, f"steps {self.steps} is absurdly large")
        for k, v in self.overrides:
            need(isinstance(v, (int, float, bool, list, tuple)) and not (isinstance(v, float) and not math.isfinite(v)),
                 f"override {k}={v!r} is not a finite number")
        need(self.stage in STAGES, f"unknown stage {self.stage!r} (stages: {', '.join(STAGES)})")
        need(self.preset in PRESETS, f"unknown preset {self.preset!r}")
        need(self.routing in ROUTING_MODES, f"unknown routing mode {self.routing!r}")
        need(self.value_dist in VALUE_DISTS, f"unknown value distribution {self.value_dist!r}")
        need(self.expert_format in EXPERT_FORMATS, f"unknown expert format {self.expert_format!r}")
        need(self.batch >= 1, f"batch must be >= 1, got {self.batch}")
        need(self.steps >= 1, f"steps must be >= 1, got {self.steps}")
        try:
            cfg = self.config()
        except (ConfigError, TypeError) as exc:
            raise CaseError(f"invalid case config: {exc}") from None
        ep_problem = ep_config.validate(self, cfg.n_experts)       # expert parallelism
        need(ep_problem is None, ep_problem)
        need(schedule.problem(self.schedule) is None, schedule.problem(self.schedule))
        kind = self.attention_kind
        if self.stage == "layer":
            need(0 <= self.layer_idx < cfg.n_layers,
                 f"layer_idx {self.layer_idx} outside 0..{cfg.n_layers - 1}")
        if kind == "mla":
            need(len(self.cache_lens) == self.batch,
                 f"cache_lens has {len(self.cache_lens)} entries for batch {self.batch}")
            need(all(n >= 0 for n in self.cache_lens), "cache_lens must be >= 0")
            need(max(self.cache_lens) + verify_dims.capacity_rows(self) <= cfg.max_cache_len,
                 f"cache length {max(self.cache_lens)} + {self.steps} step(s) exceeds the "
                 f"capacity {cfg.max_cache_len} of preset {self.preset!r}")
        if kind == "kda":
            need(len(self.state_idx) == self.batch,
                 f"state_idx has {len(self.state_idx)} entries for batch {self.batch}")
            need(self.n_slots >= 1, "n_slots must be >= 1")
            need(all(i < self.n_slots for i in self.state_idx),
                 f"a state index is >= n_slots={self.n_slots}")
            live = [i for i in self.state_idx if i > 0]
            need(len(live) == len(set(live)), "two rows share one state slot")
        verify_dims.validate(self, need, cfg)
        return self

    # ---- JSON ----
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["overrides"] = [list(kv) for kv in self.overrides]
        for key in ("cache_lens", "state_idx"):
            d[key] = list(d[key])
        if not d["schedule"]:
            del d["schedule"]                 # an eager case's JSON as before, bit for bit
        for key, default in verify_dims.DEFAULTS.items():
            if d[key] == default:
                del d[key]
            elif isinstance(default, tuple):
                d[key] = list(d[key])
        return ep_config.strip_defaults(d)

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        if not isinstance(d, dict):
            raise CaseError("case must be a JSON object")
        version = d.get("version")
        if type(version) is not int or version not in CASE_VERSIONS:
            raise CaseError(f"case version {version!r} is not supported (this k3diff reads versions "
                            f"{', '.join(map(str, CASE_VERSIONS))}); regenerate the seed with a matching k3diff")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise CaseError(f"unknown case field(s): {', '.join(unknown)}")
        try:
            d = dict(d)
            d["overrides"] = tuple((str(k), v) for k, v in d.get("overrides", ()))
            for key in ("cache_lens", "state_idx", "ep_owners", "widths", "accepted"):
                d[key] = tuple(d.get(key, ()))
            return cls(**d).validate()
        except CaseError:
            raise
        except (TypeError, ValueError) as exc:
            raise CaseError(f"malformed case: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def moe_case(ranks: int, placement: str = "contiguous", owners=None, **fields) -> Case:
    """A moe Case of `fields` on `ranks` ranks (ep_config.placed: the placement's owners unless
    `owners` are given), validated: how tests and tools write one."""
    return ep_config.placed(Case(**{"stage": "moe", **fields}), ranks, placement, owners)
