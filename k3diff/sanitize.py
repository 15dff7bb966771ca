"""`k3diff sanitize SEED... --tool memcheck|racecheck|synccheck|initcheck`: seeds replayed under
NVIDIA's compute-sanitizer, each finding one line naming the kernel and the case.

A seed is replayed in its own process (`python -m k3diff.cli replay SEED --isolate off`, so the
kernels run in the process the sanitizer watches) under `compute-sanitizer --tool TOOL`. Its
report is parsed (`parse`) into findings: an out-of-bounds or misaligned access (memcheck), a
shared-memory hazard (racecheck), a barrier misuse (synccheck), an uninitialised global read
(initcheck), a CUDA API error the program hit. Each becomes

    sanitize racecheck: Race reported between Write access ... [kernel k_mla_attn; block (3,0,0)] in case mla small B=192 ... (seeds/x.json)

with repeats of one finding in one kernel counted, not listed. A finding fails the command like a
wrong tensor (exit 1), and so does a replay that fails its case. A CUDA API call out of device
memory (`cudaErrorMemoryAllocation`) is not one: PyTorch's allocator meets it, frees its cache and
tries again, and the sanitizer reports it all the same; it is the machine's (several replays on one
GPU), counted on the seed's line, and the replay's own status says whether the case was judged
(exit 11: not on this machine); a seed that cannot be read is
exit 9, a machine without compute-sanitizer exit 11 (k3diff/exit_codes.py). `--exclude REGEX`
drops findings in kernels whose name matches (a library's kernels you do not own). `--jobs N`
runs up to N seeds at once (each seed's lines printed as it finishes, the summary and status as
with one): the N replays share one GPU, so its memory must hold N processes' worth.

Needs a GPU and the CUDA toolkit's compute-sanitizer; the parser runs anywhere and is tested on
recorded output (tests/k3diff/test_sanitize.py).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from k3diff import exit_codes
from k3diff.refusals import NO_STAGE, PREFIX as REFUSED
from k3diff.usage import MachineProblem, at_least_one

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
PREFIX = re.compile(r"^={9}(?: (.*))?$")        # the sanitizer's own lines; the program's are not
_LOCATION = re.compile(r"\s+at \S.*?\+0x[0-9a-fA-F]+ in \S+")  # " at kernel(...)+0x8c0 in file:140"
# header lines that start no finding
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
                 "Saved host backtrace", "Host Frame", "Device Frame", "Target application returned")
# "at kernel(args)+0x70 in file.cu:6" (compute-sanitizer 2022.3 and later)
_AT_NEW = re.compile(r"\bat (?P<k>\S.*?)\+0x[0-9a-fA-F]+(?: in |$)")
# "at 0x70 in file.cu:6:kernel(args)" or "at 0x70 in kernel(args)" (earlier versions)
_AT_OLD = re.compile(r"\bat 0x[0-9a-fA-F]+ in (?P<loc>.+)$")
_NO_STAGE = re.compile(re.escape(NO_STAGE) + r"'\w+'")     # "... does not implement stage 'kda'"
_WHERE = re.compile(r"(by thread \([\d, ]+\) in block \([\d, ]+\)|in block \([\d, ]+\))")


@dataclass
class Finding:
    what: str                  # the sanitizer's header line ("Invalid __global__ read of size 4 bytes")
    kernel: str = ""           # "" for a host-side error
    where: str = ""            # "by thread (31,0,0) in block (0,0,0)", as the sanitizer wrote it
    count: int = 1

    def line(self) -> str:
        kernel = f"kernel {self.kernel}" if self.kernel else "host side"
        where = f"; {self.where}" if self.where else ""
        repeats = f" (x{self.count})" if self.count > 1 else ""
        return f"{self.what} [{kernel}{where}]{repeats}"


def _kernel(text: str) -> str:
    """The kernel's name, without its arguments, from a location line."""
    m = _AT_NEW.search(text)
    if m:
        name = m.group("k")
    else:
        m = _AT_OLD.search(text)
        if not m:
            return ""
        name = re.sub(r"^.*?:\d+:", "", m.group("loc"))         # file.cu:12: before the name
    name = name.split("(")[0].strip()
    return name[:160]


def parse(text: str) -> list[Finding]:
    """The findings of one compute-sanitizer report (its `========= ` lines; the program's own
    output is ignored), repeats of one (what, kernel) merged into a count."""
    found: list[Finding] = []
    current = None
    for raw in text.splitlines():
        m = PREFIX.match(raw.rstrip())
        if not m:
            continue
        body = m.group(1) or ""
        if not body.strip():
            current = None
            continue
        if not body[0].isspace():                         # a header: a new finding, or a summary
            current = None
            head = body.strip()
            if head.startswith(_NOT_FINDINGS):
                continue
            head = re.sub(r"^(Error|WARN|Warning)\s*:\s*", "", head).rstrip(" :.")
            where = _WHERE.search(head)
            what = _LOCATION.sub("", _WHERE.sub("", head)).rstrip(" :.")
            current = Finding(what, _kernel(head), where.group(1) if where else "")
            found.append(current)
            continue
        if current is None:
            continue
        line = body.strip()
        if re.match(r"and \w+ access\b", line):          # racecheck: "and Read access at ... [4 hazards]"
            current.what += " " + _LOCATION.sub("", line)
        if not current.kernel:
            current.kernel = _kernel(line)
        if not current.where:
            w = _WHERE.search(line)
            if w and line.startswith("by thread"):
                current.where = w.group(1)
    merged: dict = {}
    for f in found:
        key = (f.what, f.kernel)
        if key in merged:
            merged[key].count += 1
        else:
            merged[key] = f
    return list(merged.values())


_NO_MEMORY = "cudaErrorMemoryAllocation"


def split_out_of_memory(found: list[Finding]) -> tuple[list[Finding], int]:
    """(the findings without the device-out-of-memory reports, how many of those there were: the
    machine's, not a kernel's)."""
    kept = [f for f in found if _NO_MEMORY not in f.what]
    return kept, sum(f.count for f in found if _NO_MEMORY in f.what)


def command(tool: str, seed: str, *, sanitizer: str, backend=None, device="cuda") -> list:
    replay = [sys.executable, "-m", "k3diff.cli", "replay", seed, "--isolate", "off", "--device", device]
    return ([sanitizer, "--tool", tool, "--print-limit", "1000", "--target-processes", "all"] + replay
            + (["--backend", backend] if backend else []))


def run(args) -> int:
    """The `k3diff sanitize` command (its arguments: k3diff/cli.py `_sanitize_args`)."""
    from k3diff.corpus import load, seed_files

    sanitizer = shutil.which(args.sanitizer) or (args.sanitizer if os.path.isfile(args.sanitizer) else None)
    if sanitizer is None:
        raise MachineProblem(f"{args.sanitizer} not found (the CUDA toolkit's compute-sanitizer; "
                             "--sanitizer PATH names it)")
    exclude = re.compile(args.exclude) if args.exclude else None
    seeds = [p for s in args.seeds for p in seed_files(s)]
    cases = [(str(p), load(p)[0].label()) for p in seeds]         # a bad seed: exit 9 before any run
    status, findings, not_run = exit_codes.PASS, 0, 0
    running = _Running()            # the sanitizers in flight: killed if this command is cut short
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = [pool.submit(_one, args, sanitizer, exclude, path, label, running) for path, label in cases]
        for future in as_completed(futures):        # --jobs 1: in the seeds' order, as before
            lines, seed_status, found, refused = future.result()
            for line in lines:
                print(line)
            sys.stdout.flush()
            findings += found
            not_run += refused
            if seed_status:
                status = exit_codes.worst([s for s in (status, seed_status) if s])
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        running.stop()
    ran = len(cases) - not_run
    print(f"sanitize {args.tool}: {findings} finding(s) over {ran} seed(s)"
          + (f"; {not_run} not run (the candidate does not run them)" if not_run else ""))
    if ran == 0 and status == exit_codes.PASS:      # a clean run over nothing is not a pass
        return exit_codes.NOTHING_JUDGED
    return status


def _one(args, sanitizer, exclude, path, label, running) -> tuple:
    """One seed under the sanitizer: (its lines, its status, its findings, 1 if not run else 0)."""
    start = time.monotonic()
    cmd = command(args.tool, path, sanitizer=sanitizer, backend=args.backend, device=args.device)
    proc = running.start(cmd)
    if proc is None:                # the command was cut short before this seed began
        return [], exit_codes.PASS, 0, 0
    with proc:
        try:
            out, _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            proc.communicate()
            return ([f"sanitize {args.tool}: hang: no result in {args.timeout:g} s in case {label} ({path})"],
                    exit_codes.FAIL, 0, 0)
        finally:
            running.done(proc)
    kept, no_memory = split_out_of_memory(parse(out))
    kept = [f for f in kept if not (exclude and f.kernel and exclude.search(f.kernel))]
    aside = f"; {no_memory} out-of-memory API error(s) set aside: the machine's" if no_memory else ""
    if kept:
        return ([f"sanitize {args.tool}: {f.line()} in case {label} ({path})" for f in kept],
                exit_codes.FAIL, len(kept), 0)
    refused = _refusal(out) if proc.returncode == exit_codes.NOTHING_JUDGED else None
    if refused:          # the candidate does not run this case: nothing ran, nothing to sanitize
        return [f"sanitize {args.tool}: not run: {refused} in case {label} ({path})"], exit_codes.PASS, 0, 1
    if proc.returncode != exit_codes.PASS:      # the case failed, or the replay could not judge it
        tail = " | ".join(line.strip() for line in out.strip().splitlines()[-3:])[:300]
        return ([f"sanitize {args.tool}: the replay exited {proc.returncode} in case {label} ({path}{aside}): {tail}"],
                proc.returncode, 0, 0)
    # one line per clean seed too: a watcher sees progress, and a run cut short says how far it got
    return ([f"sanitize {args.tool}: clean in case {label} ({path}; {time.monotonic() - start:.0f} s{aside})"],
            exit_codes.PASS, 0, 0)


class _Running:
    """The sanitizer processes of the seeds in flight; `stop` kills them and starts no more."""

    def __init__(self):
        self._lock, self._procs, self._stopped = threading.Lock(), set(), False

    def start(self, cmd):
        with self._lock:
            if self._stopped:
                return None
            # its own process group: a hang kills the replay under it too, which would otherwise
            # hold the GPU beside the seeds still running
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", start_new_session=True)
            self._procs.add(proc)
            return proc

    def done(self, proc):
        with self._lock:
            self._procs.discard(proc)

    def stop(self):
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                _kill(proc)


def _kill(proc) -> None:
    """The sanitizer and everything it started (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _refusal(out: str) -> str | None:
    """The candidate's reason when a replay judged nothing because it does not run the case."""
    for line in out.splitlines():
        if REFUSED in line:
            return line.split(REFUSED, 1)[1].strip()[:200]
        found = _NO_STAGE.search(line)
        if found:
            return found.group(0)
    return None


def add_arguments(p) -> None:
    p.add_argument("seeds", nargs="+", metavar="SEED", help="seed files or folders of them")
    p.add_argument("--tool", required=True, choices=TOOLS)
    p.add_argument("--backend", default=None, help="candidate (default: the one recorded in each seed)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--sanitizer", default="compute-sanitizer", help="the compute-sanitizer to run")
    p.add_argument("--exclude", default=None, metavar="REGEX", help="drop findings in kernels matching this")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per seed under the sanitizer")
    p.add_argument("--jobs", type=at_least_one, default=1, metavar="N",
                   help="seeds under the sanitizer at once (default 1; they share the GPU)")
