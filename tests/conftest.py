"""Shared pytest plumbing: the fuzz and soak tests count what they tried in
`fuzz_stats`, and the session summary prints the totals (pytest captures
prints inside tests, so the numbers go to the terminal reporter instead).
Under pytest-xdist each worker sends its counts back when it ends."""

from __future__ import annotations

import collections

import pytest

_STATS: collections.Counter = collections.Counter()


@pytest.fixture(scope="session")
def fuzz_stats() -> collections.Counter:
    """A session-wide Counter: `fuzz_stats["what"] += n`."""
    return _STATS


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "vyre_requires(problem): the test needs a tool (tests/requirements.py)"
    )


def pytest_runtest_setup(item):
    from requirements import check_requirements

    check_requirements(item)


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["vyre_stats"] = dict(_STATS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _STATS.update(getattr(node, "workeroutput", {}).get("vyre_stats", {}))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _STATS:
        return
    terminalreporter.section("vyre reliability: cases tried")
    cases = sum(v for k, v in _STATS.items() if not k.startswith("("))
    for key in sorted(_STATS):
        terminalreporter.write_line(f"{key:<52} {_STATS[key]:>8}")
    terminalreporter.write_line(f"{'total cases':<52} {cases:>8}")
