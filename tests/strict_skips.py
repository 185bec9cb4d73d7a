"""With LENSCOPE_NO_SKIPS=1 a skip is a failure: CI's run of a peer's own environment cannot pass by skipping it all."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

STRICT = os.environ.get("LENSCOPE_NO_SKIPS") == "1"


def _fail(report: Any) -> None:
    """Turn a skipped report into a failed one that still says why it would have skipped."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under LENSCOPE_NO_SKIPS=1 (this environment must run it): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """A module skipped at collection (importorskip at its top) fails under LENSCOPE_NO_SKIPS=1."""
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped:
        _fail(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test skipped while it runs fails under LENSCOPE_NO_SKIPS=1 (an expected failure stays as it is)."""
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        _fail(report)
