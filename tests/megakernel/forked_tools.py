"""Run `python -m <tool> ARGS` many times for the price of one interpreter start.

test_mk_tools_cli.py runs ~45 tools that refuse their arguments. As fresh interpreters each paid
~3.5 s of CPU importing torch and CuTe DSL before it refused (~150 s of CI's 2 cores in all). Here
one process (the zygote) imports those two third-party packages once, then forks a child per run:
the child is still its own process (own exit status, own stdout/stderr file descriptors, a fresh
import of every module of ours and of the tool itself), so what a test asserts on is what a fresh
`python -m` gives. What the fork skips is torch's and cutlass's import, and what that import
prints is checked once, here: nothing but warnings, the lines the tests already set aside.
"""
import json
import os
import subprocess
import sys
import textwrap

# The zygote: imports, reports what the imports printed, then serves one JSON request a line
# ([argv, stdout path, stderr path]) with one line back (the child's exit status). It forks from
# its main thread only (nothing here starts a thread), so the children inherit no held lock.
_ZYGOTE = textwrap.dedent(r"""
    import atexit, io, json, os, runpy, sys, traceback
    saved = os.dup(2)
    err = open(sys.argv[1], "w")
    os.dup2(err.fileno(), 2)
    import torch  # noqa: F401
    from megakernel.cute_env import import_cutlass
    import_cutlass()
    sys.stderr.flush()
    os.dup2(saved, 2)
    err.close()
    ours = [m for m in sys.modules if m == "megakernel" or m.startswith("megakernel.")]
    for m in ours:                 # the tool imports these afresh, as a new interpreter would
        del sys.modules[m]
    print("ready", flush=True)
    for line in sys.stdin:
        argv, out, errf = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fo, fe = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), os.open(errf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fo, 1); os.dup2(fe, 2)
                sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
                sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), line_buffering=True)
                sys.stdin = open(os.devnull)
                try:
                    if argv[0] == "-m":
                        sys.argv = [argv[1]] + argv[2:]
                        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
                    else:
                        sys.argv = list(argv)
                        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
                        runpy.run_path(argv[0], run_name="__main__")
                    code = 0
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                    if not isinstance(e.code, int) and e.code is not None:
                        print(e.code, file=sys.stderr)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                atexit._run_exitfuncs()        # what an interpreter's exit runs, os._exit skips
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps(os.waitstatus_to_exitcode(status)), flush=True)
""")


class Zygote:
    """`run(argv)` -> (exit status, stdout, stderr) of `python *argv`, forked from one process
    that has imported torch and CuTe DSL (argv: ["-m", module, ...] or [script, ...])."""

    def __init__(self, env, tmp):
        self.tmp = tmp
        self.n = 0
        imports = os.path.join(tmp, "imports.err")
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, imports], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        ready = self.proc.stdout.readline()
        with open(imports) as f:
            self.import_stderr = f.read()
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the tool zygote did not start: {self.import_stderr[-2000:]}")

    def run(self, argv):
        self.n += 1
        out, err = (os.path.join(self.tmp, f"{self.n}.{s}") for s in ("out", "err"))
        self.proc.stdin.write(json.dumps([list(argv), out, err]) + "\n")
        self.proc.stdin.flush()
        code = json.loads(self.proc.stdout.readline())
        with open(out) as fo, open(err) as fe:
            return code, fo.read(), fe.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
