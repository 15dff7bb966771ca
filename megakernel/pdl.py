"""The PDL rule: every kernel opens with `enter()`, so any launch may use programmatic dependent
launch (PDL) without changing a bit.

Why: a decode step at batch 1 is a chain of short launches (MLA 8, KDA 6, the MoE's fork-join 11),
each of which waits for the one before it to finish, drain and launch its grid before its own CTAs
start. With PDL (`launch(use_pdl=1)`, the `pdl` host argument of every kernel: kernel_args.py) the
next grid is launched while this one runs, so its CTAs are resident and waiting when this one ends.

The rule, and why it keeps the bits:
1. `griddepcontrol.wait` is the kernel's first statement, before any global load or store. It
   returns once every grid this one depends on has completed and its writes are visible (at once
   when the grid was not launched with PDL). So nothing reads an input early or writes over a
   buffer a running grid still reads: each kernel computes from exactly the inputs it would have
   had without PDL, and computes them the same way.
2. `griddepcontrol.launch_dependents` right after the wait: the next grid may launch only once
   every CTA of this one has passed its wait, i.e. once this grid really runs. Its CTAs then hold
   SM slots only while this grid's last wave runs, never before this grid's CTAs are all placed
   (the trigger fires when all CTAs have triggered or exited), and the persistent kernel's CTAs,
   which spin on each other's tickets, are all resident before anyone after it is placed.
3. Transitivity: a kernel that reads the output of the launch two back is safe, because the one
   between waited for that launch to complete before it triggered.
A kernel of another library (torch's fills and copies) is launched without PDL, so it waits for
full completion as before; event waits across streams are full dependencies too.

Checked: tests/megakernel/test_mk_pdl.py (the wait comes before every global access in the PTX of
every kernel); the GPU tests compare each step's outputs bitwise with PDL on and off.
"""
import re

from megakernel.device import cute


@cute.jit
def enter():
    """First statement of every `@cute.kernel` (the rule above)."""
    cute.arch.griddepcontrol_wait()
    cute.arch.griddepcontrol_launch_dependents()


# the PTX memory instructions (any state space but .param: the kernel's arguments) and async copies
_MEM = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:(?:ld|st|atom|red|prefetch|prefetchu)\.(?!param)"
                  r"|cp\.|cp\.async|multimem\.|tensormap\.)", re.M)
_ENTRY = re.compile(r"^\.(?:visible\s+)?\.entry\s+(\w+)", re.M)


def check_ptx(ptx: str) -> str | None:
    """The rule read back from a kernel's PTX: in each entry, `griddepcontrol.wait` then
    `griddepcontrol.launch_dependents` come before the first memory instruction (parameters
    excepted). None when it holds, else one line naming the entry and what came first."""
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(ptx)]
    if not starts:
        return "no .entry in the PTX"
    for i, (at, name) in enumerate(starts):
        body = ptx[at:starts[i + 1][0] if i + 1 < len(starts) else len(ptx)]
        wait, dep = body.find("griddepcontrol.wait"), body.find("griddepcontrol.launch_dependents")
        if wait < 0 or dep < 0:
            return f"{name}: no griddepcontrol.{'wait' if wait < 0 else 'launch_dependents'}"
        mem = _MEM.search(body)
        if mem is not None and mem.start() < max(wait, dep):
            line = body[mem.start():].strip().splitlines()[0]
            return f"{name}: {line!r} before griddepcontrol.wait / launch_dependents"
    return None
