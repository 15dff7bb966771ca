"""CPU: the PDL rule (megakernel/pdl.py) holds for every kernel and its check can fail.

- In the source: every `@cute.kernel` function of megakernel/ (experimental/ included) opens with
  `enter()`, and every `.launch(` passes `use_pdl=` (a kernel added without them fails here).
- In the PTX: `pdl.check_ptx` finds the wait before the first memory instruction, and names the
  entry and the instruction otherwise (`python -m megakernel compile`, which CI runs for sm_90a
  and sm_103a, applies it to every kernel it builds: tests/megakernel/test_mk_compile.py).
- The flag: MEGAKERNEL_PDL, the host argument every kernel takes last before its stream, and the
  value a launch passes (the step's, else 0).
"""
import ast
from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

ROOT = Path(__file__).resolve().parents[2] / "megakernel"

ENTRY = """.visible .entry kernel_cutlass_kernel_megakernelk_x_{n}(
\t.param .u64 .ptr .align 1 p_0
)
{{
\tld.param.b64 \t%rd1, [p_0];
{body}
\tret;
}}
"""
GOOD = "\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n\tld.global.b32 \t%r1, [%rd1];"


def _kernels():
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == "cute.kernel" for d in node.decorator_list):
                yield path, node
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "launch" and any(k.arg == "stream" for k in node.keywords):
                yield path, node


def test_every_kernel_opens_with_enter_and_every_launch_passes_the_flag():
    kernels = launches = 0
    for path, node in _kernels():
        where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
        if isinstance(node, ast.FunctionDef):
            first = node.body[0]
            assert isinstance(first, ast.Expr) and ast.unparse(first.value) == "enter()", \
                f"{where}: a @cute.kernel must open with pdl.enter()"
            kernels += 1
        else:
            assert any(k.arg == "use_pdl" and ast.unparse(k.value) == "A.pdl"
                       for k in node.keywords), f"{where}: launch(..., use_pdl=A.pdl)"
            launches += 1
    assert kernels >= 16 and launches >= 15, (kernels, launches)


def test_check_ptx_finds_what_breaks_the_rule():
    from megakernel.pdl import check_ptx
    assert check_ptx(ENTRY.format(n=0, body=GOOD)) is None
    assert check_ptx(ENTRY.format(n=0, body=GOOD) + ENTRY.format(n=1, body=GOOD)) is None
    early = "\tld.global.nc.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd1];\n" + GOOD
    assert "kernel_cutlass_kernel_megakernelk_x_1: 'ld.global.nc.v4.u32" in check_ptx(
        ENTRY.format(n=0, body=GOOD) + ENTRY.format(n=1, body=early))
    for first in ("\tst.shared.u32 \t[%r1], %r2;", "\t@%p1 atom.global.add.u32 \t%r1, [%rd1], 1;",
                  "\tcp.async.cg.shared.global [%r1], [%rd1], 16;", "\tred.global.add.u32 [%rd1], 1;",
                  "\tld.u32 \t%r1, [%rd1];"):
        assert check_ptx(ENTRY.format(n=0, body=first + "\n" + GOOD)) is not None, first
    late = "\tgriddepcontrol.wait;\n\tld.global.b32 \t%r1, [%rd1];\n\tgriddepcontrol.launch_dependents;"
    assert "before griddepcontrol" in check_ptx(ENTRY.format(n=0, body=late))
    assert "no griddepcontrol.wait" in check_ptx(ENTRY.format(n=0, body="\tld.global.b32 \t%r1, [%rd1];"))
    assert "no griddepcontrol.launch_dependents" in check_ptx(
        ENTRY.format(n=0, body="\tgriddepcontrol.wait;"))
    assert check_ptx("// no kernel") == "no .entry in the PTX"


def test_the_flag_from_the_environment():
    from megakernel import config
    assert config.from_env({}).pdl is True
    assert config.from_env({"MEGAKERNEL_PDL": "0"}).pdl is False
    with pytest.raises(ValueError, match="MEGAKERNEL_PDL: 0 or 1; got 'yes'"):
        config.from_env({"MEGAKERNEL_PDL": "yes"})


def test_every_kernel_takes_the_flag_last_before_its_stream():
    import inspect

    from megakernel import registry
    from megakernel.dims import SMALL
    from megakernel.kernel_args import PDL, placeholders
    from megakernel.device import Int32
    obj = registry.KERNELS["combine"](SMALL)
    names = list(inspect.signature(type(obj).__call__).parameters)
    assert names[-2:] == [PDL, "stream"]
    assert PDL not in inspect.signature(type(obj).kernel).parameters      # host-only
    ph = placeholders(obj, lambda t, n: object())
    assert len(ph) == len(names) - 2 and isinstance(ph[-1], Int32)      # less self and stream


def test_a_launch_passes_the_steps_flag_else_zero(monkeypatch):
    from megakernel import cache, fast_call
    from megakernel.dims import SMALL
    from megakernel import registry
    monkeypatch.setattr(fast_call, "enabled", lambda: False)
    seen = []
    obj = registry.KERNELS["combine"](SMALL)
    launch = cache.Launch(lambda *a: seen.append(a[-2]), obj)
    monkeypatch.setattr(fast_call, "cu_stream", lambda s: s)
    monkeypatch.setattr(cache, "ptr", lambda t, v: v)
    named = {n: 0 if t == "int" else type("P", (), {"data_ptr": lambda self: 16})()
             for n, t in launch.args}
    launch(named, 0)
    launch(dict(named, pdl=1), 0)
    assert seen == [0, 1]
