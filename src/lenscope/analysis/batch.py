"""What the run path hands back: AnalysisBatch (one op call) and AnalysisResults (a run_analysis call)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError, hint

OUTPUT = "output"  # the key of an op's results that are not a mapping (one array or a tuple)


class AnalysisBatch(Mapping[str, Any]):
    """One batch's op outputs, in memory (NumPy): `batch.mean` or `batch["mean"]`, plus `batch.batch_idx`.

    Results that are not a mapping sit under the key "output"; `.results` is the op's value as returned.
    """

    def __init__(self, results: Any, batch_idx: int = 0) -> None:
        self.results = results
        self.batch_idx = batch_idx
        self._outputs = dict(results) if isinstance(results, Mapping) else {OUTPUT: results}

    def __getitem__(self, key: str) -> Any:
        if key not in self._outputs:
            raise KeyError(f"the analysis batch has no output {key!r}{hint(str(key), self._outputs)}; "
                           f"outputs: {', '.join(map(str, self._outputs))}")
        return self._outputs[key]

    def __getattr__(self, key: str) -> Any:
        outputs = self.__dict__.get("_outputs", {})
        if key.startswith("__") or key not in outputs:
            raise AttributeError(f"AnalysisBatch has no output {key!r}{hint(key, outputs)}; "
                                 f"outputs: {', '.join(map(str, outputs))}")
        return outputs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._outputs)

    def __len__(self) -> int:
        return len(self._outputs)

    def __repr__(self) -> str:
        return f"AnalysisBatch(batch_idx={self.batch_idx}, outputs={list(self._outputs)})"


@dataclass(frozen=True)
class AnalysisEntry:
    """One cfg of a run_analysis call: its name, the node its results went to and their artifacts there, and the
    results: `.dataset` (a table analysis, read back from the stored NAME.parquet) or `.results` (in memory)."""

    name: str
    node: Any
    artifacts: tuple[str, ...] = ()
    dataset: Any = None
    results: Any = None

    @property
    def value(self) -> Any:
        """What `run_analysis(...)[name]` returns: the dataset of a table analysis, else the results."""
        return self.dataset if self.dataset is not None else self.results


@dataclass(frozen=True)
class AnalysisResults(Mapping[str, Any]):
    """The outcome of run_analysis, in memory: `out[name]` is a cfg's dataset or results, `out.entry(name)` its
    whole AnalysisEntry; with one cfg, `.node`, `.artifacts`, `.dataset` and `.results` read that cfg's."""

    entries: Mapping[str, AnalysisEntry] = field(default_factory=dict)

    def entry(self, name: str) -> AnalysisEntry:
        """The AnalysisEntry of the cfg saved as `name`."""
        if name not in self.entries:
            raise UsageError(f"no analysis {name!r} in this run{hint(name, self.entries)}; "
                             f"analyses: {', '.join(self.entries)}")
        return self.entries[name]

    def __getitem__(self, name: str) -> Any:
        if name not in self.entries:
            raise KeyError(name)
        return self.entries[name].value

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def _only(self) -> AnalysisEntry:
        if len(self.entries) != 1:
            raise UsageError(f"this run has {len(self.entries)} analyses ({', '.join(self.entries)}); "
                             "pick one with store.entry(name)")
        return next(iter(self.entries.values()))

    @property
    def node(self) -> Any:
        """The node the only analysis wrote to."""
        return self._only().node

    @property
    def artifacts(self) -> tuple[str, ...]:
        """The artifact names the only analysis saved."""
        return self._only().artifacts

    @property
    def dataset(self) -> Any:
        """The only analysis's table (a datasets.Dataset read from its stored Parquet), or None."""
        return self._only().dataset

    @property
    def results(self) -> Any:
        """The only analysis's in-memory results, or None for a table analysis."""
        return self._only().results
