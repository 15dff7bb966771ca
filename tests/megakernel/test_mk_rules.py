"""CPU, no imports of the code checked: the fixed import rules (ARCHITECTURE.md) and the one
reader of the environment, read from the source with `ast`.

- reference/ imports nothing of ours; megakernel/ imports neither k3diff/ nor reference/ (a kernel
  that borrows the oracle's math shares its bugs); k3diff/ reaches a kernel only through
  k3diff/backends/__init__.py, which loads it by name (no static import of megakernel).
- megakernel/ reads the environment only in megakernel/config.py (the settings object): a
  module that reads os.environ or os.getenv elsewhere bypasses the object the benches, the
  compile list and the kernel store share. cute_env.py alone also touches it: it sets CuTe DSL's
  own CUTE_DSL_ARCH before cutlass is imported (a variable of the DSL, not a setting of ours).
Each rule is also checked against a planted violation, so neither check can only pass.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package -> the top-level packages of ours it may not import
FORBIDDEN = {"reference": {"k3diff", "megakernel"}, "megakernel": {"k3diff", "reference"},
             "k3diff": {"megakernel"}}
ENV_READER = ROOT / "megakernel" / "config.py"
DSL_ENV = ROOT / "megakernel" / "cute_env.py"


def imported_roots(tree):
    """The top-level package of every import in a module (function-level imports too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def env_reads(tree):
    """Lines that touch os.environ / os.getenv / environ (however imported)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            yield node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in ("environ", "getenv", "environb") for a in node.names):
            yield node.lineno


def sources(package):
    return sorted((ROOT / package).rglob("*.py"))


def crossings(path, package):
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(ROOT)}:{ln} imports {root}" for ln, root in imported_roots(tree)
            if root in FORBIDDEN[package]]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_across_the_fixed_rules(package):
    bad = [c for p in sources(package) for c in crossings(p, package)]
    assert not bad, "\n".join(bad)


def test_megakernel_reads_the_environment_only_in_its_settings_module():
    bad = [f"{p.relative_to(ROOT)}:{ln}" for p in sources("megakernel")
           if p not in (ENV_READER, DSL_ENV) for ln in env_reads(ast.parse(p.read_text(), str(p)))]
    dsl = [ln for ln in env_reads(ast.parse(DSL_ENV.read_text())) if "CUTE_DSL_ARCH" not in
           DSL_ENV.read_text().splitlines()[ln - 1]]
    assert not dsl, f"cute_env.py may set CUTE_DSL_ARCH only; lines {dsl}"
    assert not bad, "read the environment through megakernel/config.py:\n" + "\n".join(bad)


def test_the_checks_catch_planted_violations(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("def f():\n    from k3diff.case import Case\n    import reference.mla\n")
    got = [root for _, root in imported_roots(ast.parse(planted.read_text()))]
    assert got == ["k3diff", "reference"]
    for code in ("import os\nx = os.environ.get('A')\n", "import os\nos.getenv('A')\n",
                 "from os import environ\n", "import os\nd = dict(os.environ)\n"):
        assert list(env_reads(ast.parse(code))), code
    assert not list(env_reads(ast.parse("import os\np = os.path.join('a', 'b')\n")))


def module_edges(packages=("k3diff", "reference", "megakernel")) -> dict:
    """module -> {module it imports: line}, function-level imports included (a lazy import still
    ties two modules: neither can be read, changed or moved without the other)."""
    mods = {}
    for package in packages:
        for p in sources(package):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            mods[name] = p
    edges = {m: {} for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and not m.startswith(t + "."):
                    edges[m].setdefault(t, node.lineno)
    return edges


def circles(edges: dict) -> list:
    """The import circles (strongly connected sets of more than one module), Tarjan's way."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    edges = module_edges()
    bad = circles(edges)
    assert not bad, "\n".join(" <-> ".join(c) + ": " + ", ".join(
        f"{a} -> {b} (line {edges[a][b]})" for a in c for b in edges[a] if b in c) for c in bad)
    # planted: the circle the house had (isolation -> judge -> ... -> rank_pool -> isolation)
    planted = {**edges, "k3diff.rank_pool": {**edges["k3diff.rank_pool"], "k3diff.isolation": 1}}
    assert any("k3diff.isolation" in c and "k3diff.rank_pool" in c for c in circles(planted))
