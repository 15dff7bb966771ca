"""UsageProblem: the command asked for something impossible. A leaf, so that every module that
checks a request (the session, the distributed candidate, the CLI) can say so without importing
the others."""


class UsageProblem(ValueError):
    """The command was wrong (a bad device, output path, option combination): one line for the
    user; pytest turns it into a UsageError (exit 4), `k3diff` into exit 2."""
