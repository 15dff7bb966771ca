"""The shape of a results line as the report reads it: each field the page, the tables or the
compare use, and the JSON types it may have. A results file is untrusted data (an artifact from
another machine, a file edited by hand): a field of another type is refused here with the line
and the field named, before any table trips over it as a TypeError deep in the page.

`problem(obj)` -> None, or "field: expected TYPE" for the first field of the wrong type. Fields not
listed are free (a newer k3diff's additions still load); listed fields may be absent.
"""
from __future__ import annotations

NUM = (int, float)
STR = (str,)
NONE = (type(None),)
SCALAR = (str, int, float, bool, type(None))
# any JSON value: the page only prints these (environment: a newer k3diff may record a list of GPUs)
ANY = SCALAR + (list, dict)


def _names(types) -> str:
    if set(types) >= set(ANY):
        return "any JSON value"
    names = {int: "int", float: "number", str: "string", bool: "bool", type(None): "null", list: "list", dict: "object"}
    return " or ".join(dict.fromkeys(names[t] for t in types))


def _is(value, types) -> bool:
    if isinstance(value, bool) and bool not in types:        # JSON true is not a count or a seconds
        return False
    return isinstance(value, types)


def _list_of(value, types) -> bool:
    return isinstance(value, list) and all(_is(v, types) for v in value)


def _dict_of(value, types) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is(v, types) for k, v in value.items())


def _boundaries(value) -> bool:
    return isinstance(value, dict) and all(_list_of(v, NUM) for v in value.values())


def _tensors(value) -> bool:
    nums = ("ratio", "max_err", "bound", "similarity", "ulps", "accuracy", "l2")
    return isinstance(value, list) and all(
        isinstance(t, dict) and _is(t.get("tensor"), STR) and _is(t.get("ok", True), (bool,))
        and all(_is(t.get(k), NUM + NONE) for k in nums) for t in value)


def _worst(value) -> bool:
    return value is None or (isinstance(value, list) and len(value) >= 2 and _is(value[0], STR)
                             and _is(value[1], NUM + NONE) and all(_is(v, NUM + NONE) for v in value[2:]))


def _error_map(value) -> bool:
    return value is None or (isinstance(value, dict) and _is(value.get("tensor"), STR)
                             and _is(value.get("what", ""), STR)
                             and isinstance(value.get("values"), list)
                             and all(_list_of(row, NUM) for row in value["values"]))


def _coverage(value) -> bool:
    return isinstance(value, dict) and isinstance(value.get("dims", {}), dict) and all(
        _list_of(v, NUM) for v in value.get("dims", {}).values())


def _case(value) -> bool:
    return _dict_of(value, SCALAR + (list, dict)) and all(       # the axes the coverage table counts
        _is(value.get(k), SCALAR) for k in ("stage", "batch", "routing", "expert_format", "value_dist",
                                             "preset", "steps"))


# field -> the types it may have, or a check of a nested value (its name says what it expects)
CASE = {
    "stage": STR, "id": STR, "label": STR, "phase": STR + NONE, "item": STR + NONE, "ok": (bool,),
    "skipped": STR + (bool,) + NONE, "error": STR + NONE, "failure": STR + NONE, "backend": STR + NONE,
    "device": STR + NONE, "seconds": NUM + NONE, "tie_flips": (int,), "forced": (bool,) + NONE,
    "batch": (int,) + NONE, "max_cache_len": (int,) + NONE, "routing_ok": (bool,) + NONE,
    "phases": (_dict_of, NUM), "tensors": (_tensors,), "worst": (_worst,), "error_map": (_error_map,),
    "case": (_case,), "coverage": (_coverage,),
}
RUN = {
    "format": (int,), "seed": (int, str) + NONE, "profile": STR + NONE, "backend": STR + NONE,
    "device": STR + NONE, "shard": STR + NONE, "worker": STR + NONE, "parts": (_list_of, STR),
    "started": STR + NONE, "started_unix": NUM + NONE, "boundaries": (_boundaries,), "argv": (_list_of, STR),
    "environment": (_dict_of, ANY), "run_id": STR + (int,) + NONE, "rerun": (dict,) + NONE,
    "budget_table": STR + NONE,
}
LOADED = {"backend": STR + NONE, "device": STR + NONE, "boundaries": (_boundaries,)}
FAILURE = {"path": STR, "replay": STR, "item": STR + NONE, "headline": STR + NONE, "id": STR + NONE,
           "stage": STR + NONE}
END = {"seconds": NUM + NONE, "exitstatus": (int,) + NONE, "cases": (int,) + NONE, "failing": (int,) + NONE,
       "error": STR + NONE}
FIELDS = {"run": RUN, "case": CASE, "loaded": LOADED, "failure": FAILURE, "end": END, "budgets": {}}
REQUIRED = {"case": ("stage", "id", "label", "ok", "skipped")}
_NESTED = {_dict_of: "an object of {}", _list_of: "a list of {}", _tensors: "a list of tensor objects",
           _worst: "[tensor, share, ...] or null", _error_map: "an error map or null",
           _coverage: "an object with dims", _case: "a case object", _boundaries: "an object of number lists"}


def problem(obj: dict) -> str | None:
    """The first field of `obj` (a results line whose kind is known) of a type the report cannot
    use, as "field: expected ...", else None."""
    kind = obj["kind"]
    for name in REQUIRED.get(kind, ()):
        if name not in obj:
            return f"{name}: missing"
    for name, rule in FIELDS[kind].items():
        if name not in obj:
            continue
        value = obj[name]
        if rule[0] in _NESTED:                  # a check of a nested value, not a type
            check, *arg = rule
            if not check(value, *arg):
                return f"{name}: expected {_NESTED[check].format(_names(arg[0]) if arg else '')}"
        elif not _is(value, rule):
            return f"{name}: expected {_names(rule)}"
    return None
