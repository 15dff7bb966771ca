"""`pytest` with no arguments in the checkout collects this folder (pyproject's testpaths: so that
`pytest --k3diff` judges the candidate and nothing else), and without --k3diff every item here is
skipped. A contributor who typed plain `pytest` expecting the project's own tests is told, in one
line, where they are."""
import pytest

HINT = ("k3diff: plain `pytest` here collects the differential suite (it runs with --k3diff); "
        "the project's own tests: `pytest tests` (everything CI runs: scripts/test)")


def pytest_terminal_summary(terminalreporter, config):
    from k3diff import options as opt

    if config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.getoption(opt.ENABLE) \
            and not config.getoption(opt.MUTANTS):
        terminalreporter.write_line(HINT)
