"""The plugin registers its markers in every pytest run of an environment where k3diff is
installed: each one namespaced (k3diff...), so none takes a name a project may use (a bare `gpu`
was registered once)."""


def _markers(pytester, *args) -> set:
    config = pytester.parseconfigure(*args)
    try:
        return {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    finally:
        config._ensure_unconfigure()


def test_every_marker_the_plugin_registers_is_namespaced(pytester):
    ours = _markers(pytester) - _markers(pytester, "-p", "no:k3diff.plugin")
    assert ours, "the plugin registered no marker: this test no longer sees them"
    assert all(name.startswith("k3diff") for name in ours), sorted(ours)
