"""CPU: tools/ptx_dump.py's diff (the PTX check of a refactor): identical files, files that differ
only in the kernels' symbol names (a kernel moved to another module), files that differ, and
files on one side only are each told apart, and only a real difference fails."""
from megakernel.tools.ptx_dump import diff

PTX = ".visible .entry kernel_cutlass_kernel_megakernel{m}Gemv_0(\n\tld.param.b64 %rd1, [{k}];\n"


def test_the_diff_tells_names_from_code(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "same.ptx").write_text(PTX.format(m="k_gemv", k="x"))
    (b / "same.ptx").write_text(PTX.format(m="k_gemv", k="x"))
    (a / "moved.ptx").write_text(PTX.format(m="k_gemv", k="x"))
    (b / "moved.ptx").write_text(PTX.format(m="experimentalk_gemv", k="x"))
    (a / "gone.ptx").write_text("x")
    assert diff(a, b) == 0
    out = capsys.readouterr().out
    assert "names only  moved.ptx" in out and "before only gone.ptx" in out
    assert "1 identical, 1 differ in symbol names only, 0 differ" in out
    (b / "same.ptx").write_text(PTX.format(m="k_gemv", k="y"))
    assert diff(a, b) == 1 and "DIFFERS     same.ptx" in capsys.readouterr().out
