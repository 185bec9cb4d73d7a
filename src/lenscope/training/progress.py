"""Progress display: a tqdm bar on a terminal, sparse plain lines otherwise (CI logs stay readable); a line saying
what a silent phase does (capturing activations, compiling) once it has lasted a few seconds."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Mapping

from tqdm.auto import tqdm

QUIET_S = 3.0  # a phase silent this long says what it is doing


@contextlib.contextmanager
def announced(what: str, after: float = QUIET_S, stream=None) -> Iterator[None]:
    """Say `lenscope: WHAT` on stderr if the block is still running after `after` seconds, and how long it took.

    A quick phase prints nothing; a slow one (a first compile, a capture over checkpoints) says what the wait is.
    """
    stream = stream or sys.stderr
    start, said = time.perf_counter(), threading.Event()

    def say() -> None:
        said.set()
        print(f"lenscope: {what}...", file=stream, flush=True)

    timer = threading.Timer(after, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            print(f"lenscope: {what}: {time.perf_counter() - start:.0f} s", file=stream, flush=True)


class Progress:
    """Steps, loss, steps/s and ETA for a loop of known length."""

    def __init__(self, total: int, initial: int = 0, desc: str = "train", stream=None) -> None:
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total, self.done, self.desc = total, initial, desc
        self._t0, self._start = time.perf_counter(), initial
        self.rate: float | None = None  # steps/s last measured by the caller (what it records), if any
        self._bar = tqdm(total=total, initial=initial, desc=desc, file=self.stream, dynamic_ncols=True,
                         unit="step") if self.tty else None

    def update(self, n: int = 1) -> None:
        """Advance by `n` steps."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def show(self, values: Mapping[str, float], rate: float | None = None) -> None:
        """Show the latest values: in the bar, or as one line when not on a terminal.

        `rate` is the steps/s the caller measured and records (`train/steps_per_s`); the line shows that
        same number, and the last one given until a new one comes. Without any, the average since start.
        """
        self.rate = rate if rate is not None else self.rate
        text = {k: f"{v:.4g}" for k, v in values.items()}
        if self._bar is not None:
            self._bar.set_postfix(text, refresh=False)
            return
        rate = self.rate
        if rate is None:
            elapsed = time.perf_counter() - self._t0
            rate = (self.done - self._start) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        parts = " ".join(f"{k}={v}" for k, v in text.items())
        line = f"{self.desc} {self.done}/{self.total} {parts} {rate:.1f} step/s eta {eta:.0f}s"
        print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()
