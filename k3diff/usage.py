"""UsageProblem: the command asked for something impossible. A leaf, so that every module that
checks a request (the session, the distributed candidate, the CLI) can say so without importing
the others. Each kind has its own exit status (k3diff/exit_codes.py)."""
import argparse

from k3diff import exit_codes


class UsageProblem(ValueError):
    """The command was wrong (an option combination, a name that is not known): one line for the
    user, exit 4 from pytest and from `k3diff`."""
    exit_code = exit_codes.USAGE


class PathProblem(UsageProblem):
    """An output path k3diff cannot write (--k3diff-save, --k3diff-report): exit 10."""
    exit_code = exit_codes.PATH


class MachineProblem(UsageProblem):
    """This machine cannot do what was asked (no such device, too many workers for its GPUs): exit 11."""
    exit_code = exit_codes.MACHINE


class CaseTooLarge(RuntimeError):
    """A case this machine cannot hold or judge in time (one line): exit 11, the machine's, not the
    candidate's (k3diff.sizing raises it; here so that modules without torch can name it)."""
    exit_code = exit_codes.MACHINE


def at_least_one(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count of examples, of jobs), else argparse's one line."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value
