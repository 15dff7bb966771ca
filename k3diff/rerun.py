"""The command that runs this run again: the summary's `next:` line, the results file's start record,
the JUnit suite property and the CLI's `rerun:` line all come from here.

It is the recorded command line itself (pytest's `config.invocation_params.args`, the CLI's argv),
shell-quoted, so every option that changes what is judged (backend, profile, preset, device, seed,
shard, `-k`, `--pyargs`, `-n`, the test paths, ranks, isolation, timeout, a plugin's own options)
comes back as it was typed, with two changes: the run's seed pinned when it was drawn, and the
options that only name where output goes (the results file, JUnit XML) left out, so following the
line never overwrites the first run's files. A list of options to keep would drop the next option
someone adds; a list of outputs to leave out cannot change a verdict when it misses one.
"""
from __future__ import annotations

import os
import shlex
import sys

from k3diff import options as opt
from k3diff.schedule import ENV as SCHEDULE_ENV
from k3diff.session import TARGET_ENV

# options whose value is only where this run's output went: the rerun writes none of them.
# (name, takes a value); `--name=value` forms are matched too
OUTPUT_ONLY = (("--k3diff-report", True), ("--junitxml", True), ("--junit-xml", True),
               ("--resultlog", True), ("--result-log", True), ("--html", True), ("--report-log", True))

# what a rerun in another shell needs written before the command: PYTEST_ADDOPTS (pytest reads it
# as if typed), and k3diff's variables that change what is drawn (the schedules a GPU run draws,
# hypothesis.target() steering the search)
ENV_ARGS = ("PYTEST_ADDOPTS", SCHEDULE_ENV, TARGET_ENV)


def without_outputs(args) -> list[str]:
    """`args` less the output-only options of OUTPUT_ONLY (both `--opt value` and `--opt=value`)."""
    out, skip = [], False
    names = dict(OUTPUT_ONLY)
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in names:
            skip = names[name] and "=" not in a
            continue
        out.append(a)
    return out


def joined(args, options) -> list[str]:
    """`args` with each of `options` in the `--opt=value` form: the space form of a path option is
    refused once its folder exists outside the tested ones (k3diff.options.refuse_moved_rootdir),
    and the first run has just made the save folder."""
    out, it = [], iter(args)
    for a in it:
        if a in options:
            value = next(it, None)
            out.append(a if value is None else f"{a}={value}")
        else:
            out.append(a)
    return out


def with_option(args, option: str, value) -> list[str]:
    """`args` with `option value` appended unless the option is already given (either form)."""
    if value is None or any(a == option or a.startswith(option + "=") for a in args):
        return list(args)
    return list(args) + [option, str(value)]


def program(argv0: str | None = None) -> list[str]:
    """How pytest was started: `pytest` from its console script, else `python -m pytest`."""
    name = os.path.basename(argv0 if argv0 is not None else (sys.argv[0] if sys.argv else ""))
    if name in ("pytest", "py.test"):
        return [name]
    return ["python", "-m", "pytest"]


def pytest_args(config, seed) -> list[str]:
    """The arguments of the run to repeat: as invoked, the drawn seed pinned, outputs left out."""
    args = [str(a) for a in config.invocation_params.args]
    return with_option(joined(without_outputs(args), opt.PATH_OPTIONS), opt.SEED, seed)


def _env_prefix(environ=None) -> list[str]:
    environ = os.environ if environ is None else environ
    return [f"{k}={environ[k]}" for k in ENV_ARGS if environ.get(k)]


def pytest_line(config, seed, argv0: str | None = None, environ=None) -> str:
    """The shell line that repeats a pytest run, quoted so that it pastes as the same words."""
    env = _env_prefix(environ)
    return " ".join([shlex.quote(e) for e in env] + [shlex.join(program(argv0) + pytest_args(config, seed))])


def pytest_record(config, seed, argv0: str | None = None, environ=None) -> dict:
    """The rerun as data for the results file's start record: the words, the folder they run in,
    the environment they need, and the line."""
    return {"program": program(argv0), "args": pytest_args(config, seed),
            "cwd": str(config.invocation_params.dir), "env": dict(e.split("=", 1) for e in _env_prefix(environ)),
            "line": pytest_line(config, seed, argv0, environ)}


def cli_line(argv, seed_option: str | None = None, seed=None, environ=None) -> str:
    """The `k3diff` command line that repeats a CLI run (`seed_option` pinned to `seed` when absent)."""
    args = [str(a) for a in argv]
    if seed_option is not None:
        args = with_option(args, seed_option, seed)
    return " ".join([shlex.quote(e) for e in _env_prefix(environ)] + [shlex.join(["k3diff"] + args)])
