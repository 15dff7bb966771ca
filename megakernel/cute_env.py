"""The one place that imports cutlass: the target arch must be set before the first import.

CuTe DSL reads CUTE_DSL_ARCH when it is imported; with no GPU present it would otherwise target
sm_100a. The H200 is sm_90a (GB300 is sm_103a); `compile --arch` runs each arch in a subprocess.
"""
import os

DEFAULT_ARCH = "sm_90a"
ARCHS = ("sm_90a", "sm_103a")   # what `compile --arch` takes: the H200's and GB300's, built in CI


def import_cutlass():
    """Import cutlass with the arch fixed; returns the module (raises ImportError if missing)."""
    os.environ.setdefault("CUTE_DSL_ARCH", DEFAULT_ARCH)   # the DSL's variable, not a setting of ours
    import cutlass  # noqa: F401  (the import is the point)
    return cutlass


def unavailable_reason() -> str | None:
    """None if CuTe DSL imports here, else a one-line reason."""
    try:
        import_cutlass()
    except Exception as e:  # ImportError, or a broken install
        return f"CuTe DSL (nvidia-cutlass-dsl) does not import: {type(e).__name__}: {e}".splitlines()[0]
    return None
