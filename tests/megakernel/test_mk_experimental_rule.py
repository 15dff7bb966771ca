"""CPU, read from the source with `ast`: megakernel/experimental/ is off the shipped path. No
module outside it imports it at module level (importing the backend, a step or the registry
never loads an experiment); the only imports inside functions are those that run an experiment
when asked for (the persistent launch, MEGAKERNEL_STREAMS=persistent) or build it on request
(`compile --experimental`, ptx_dump, the tools). A planted module-level import fails."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "megakernel"
# where a function may import an experiment, and why
LAZY_OK = {
    "megakernel/moe.py": "LatentMoE.launch runs the persistent launch when it is chosen",
    "megakernel/registry.py": "persistent_step builds the persistent kernel when it is compiled",
    "megakernel/__main__.py": "compile --experimental",
}


def _experimental(node):
    if isinstance(node, ast.ImportFrom):
        mod = node.module or ""
        return mod.startswith("megakernel.experimental") or (
            mod == "megakernel" and any(a.name == "experimental" for a in node.names))
    if isinstance(node, ast.Import):
        return any(a.name.startswith("megakernel.experimental") for a in node.names)
    return False


def violations(source: str, rel: str) -> list[str]:
    tree = ast.parse(source)
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if not _experimental(node):
            continue
        if id(node) in top:
            out.append(f"{rel}:{node.lineno}: imports megakernel/experimental at module level")
        elif rel not in LAZY_OK and not rel.startswith("megakernel/tools/"):
            out.append(f"{rel}:{node.lineno}: imports megakernel/experimental (allowed only in {sorted(LAZY_OK)} and tools/)")
    return out


def test_nothing_shipped_imports_an_experiment_at_module_level():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("megakernel/experimental/"):
            bad += violations(path.read_text(encoding="utf-8"), rel)
    assert bad == []


def test_a_planted_import_fails():
    assert violations("from megakernel.experimental import launch_persistent\n", "megakernel/moe.py")
    assert violations("def f():\n    from megakernel import experimental\n", "megakernel/kda.py")
    assert not violations("def f():\n    from megakernel.experimental import k_persistent\n", "megakernel/registry.py")
