"""A tandem plot() that never returns: abandoned at training/analysis_deadline with one line; training goes on."""

from __future__ import annotations

import logging
import threading

from test_tandem import host

from lenscope.examples.grokking_analyses import SummaryAnalysis
from lenscope.runner import run_job
from lenscope.store import Node, Store


def test_a_plot_that_never_returns_is_abandoned_at_the_deadline_and_training_goes_on(tiny, store_root, caplog):
    release = threading.Event()

    class Stuck(SummaryAnalysis):
        NAME = "stuck"

        def plot(self, results):
            if self.node.seq == 20:
                release.wait()  # never returns while the run lasts
            return super().plot(results)

    caplog.set_level(logging.ERROR, logger="lenscope.tandem")
    done: list = []
    job = threading.Thread(target=lambda: done.append(run_job(
        host(Stuck, SummaryAnalysis), tiny + ["training/analysis_deadline=3"], store=store_root)), daemon=True)
    try:
        job.start()
        job.join(120)
        assert done, "training waited for the stuck plot"
    finally:
        release.set()
    node = done[0]
    store = Store(store_root)
    assert node.seq == 40 and store.status(node) == "done"
    at20 = Node(node.name, node.nonce, 20)
    assert sorted(store.get(at20).artifacts) == ["stuck.error", "summary"]  # nothing of the abandoned plot
    assert store.values(at20)["tandem/stuck/error"].startswith("TimeoutError: did not finish within 3s")
    assert sorted(store.get(node).artifacts) == ["stuck", "summary"]  # the next validation publishes again
    lines = [r.getMessage() for r in caplog.records if r.name == "lenscope.tandem"]
    assert lines[0] == (f"tandem analysis stuck failed at {at20}: TimeoutError: did not finish within 3s "
                        "(training/analysis_deadline): abandoned; training goes on")
    store.close()
