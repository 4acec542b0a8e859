"""Results read back from a run's or a study's output folder: the CSV files as numpy columns
(parsed by the native module, bit for bit what the library wrote), ``summary.json`` as a dict."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _native

Columns = Dict[str, np.ndarray]


# The writers' integer and text columns, for a table with no rows (``breaks.csv`` of a run in
# which nothing broke), whose cells cannot say: the same dtypes as a table with rows.
_INTEGER_COLUMNS = {"step", "bond", "i", "j", "id", "fixed", "fragment", "label", "particles", "bonds", "n_broken",
                    "n_fragments"}
_TEXT_COLUMNS = {"mode"}


def _empty(name: str) -> np.ndarray:
    if name in _INTEGER_COLUMNS:
        return np.zeros(0, dtype=np.int64)
    return np.zeros(0, dtype=str) if name in _TEXT_COLUMNS else np.zeros(0)


def read_columns(path: Union[str, "os.PathLike[str]"]) -> Columns:
    """A CSV file as ``{column: 1-D array}``: int64 where every cell is an integer, float64
    where every cell is a number (empty cells NaN), else an array of str; a file without rows
    gives each column the dtype the writer's rows have (``breaks.csv``: ``step``, ``bond``,
    ``i``, ``j`` int64, ``mode`` str)."""
    cols = _native.read_csv(os.fspath(path))
    out = {k: v if isinstance(v, np.ndarray) else np.array(v, dtype=str) for k, v in cols.items()}
    if all(len(v) == 0 for v in out.values()):
        out = {k: _empty(k) for k in out}
    return out


def _frame(columns: Columns) -> Any:
    import pandas as pd  # optional: only these helpers need it

    # copy=False: every column stays the array it is (pandas >= 2 keeps dict columns apart).
    return pd.DataFrame(columns, copy=False)


class RunResult:
    """What a run wrote, read back.

    ``series``: ``series.csv`` as ``{column: 1-D array}`` (``step``, ``t``, ``E``, … see
    docs/SCENARIOS.md); ``final``: ``final_state.csv`` (or, above 10⁶ particles, the state in
    ``checkpoint.bin``) in the same columns (``id``, ``x`` … ``wz``, ``mass``, ``inertia``,
    ``diameter``, ``fixed``, ``fragment``); ``breaks`` and ``fragments``: ``breaks.csv`` and
    ``fragments.csv`` where the run has them (else None); ``summary``: ``summary.json``;
    ``out``: the folder (None when the run went to a temporary folder that is gone);
    ``messages``: what the run announced (the CLI's ``rrpdem: …`` lines).
    """

    def __init__(
        self,
        series: Columns,
        final: Optional[Columns],
        breaks: Optional[Columns],
        fragments: Optional[Columns],
        summary: Dict[str, Any],
        out: Optional[Path],
        messages: Sequence[str] = (),
    ) -> None:
        self.series = series
        self.final = final
        self.breaks = breaks
        self.fragments = fragments
        self.summary = summary
        self.out = out
        self.messages = list(messages)

    @classmethod
    def read(cls, out: Union[str, "os.PathLike[str]"], messages: Sequence[str] = ()) -> "RunResult":
        """Reads the outputs of the run folder ``out``."""
        d = Path(out)
        with open(d / "summary.json", encoding="utf-8") as f:
            summary = json.load(f)
        if (d / "final_state.csv").is_file():
            final: Optional[Columns] = read_columns(d / "final_state.csv")
        elif (d / "checkpoint.bin").is_file():
            final = dict(_native.final_from_checkpoint(os.fspath(d)))
        else:
            final = None
        optional = {name: read_columns(d / f"{name}.csv") if (d / f"{name}.csv").is_file() else None
                    for name in ("breaks", "fragments")}
        return cls(read_columns(d / "series.csv"), final, optional["breaks"], optional["fragments"], summary, d,
                   messages)

    @property
    def status(self) -> str:
        """``completed``, ``interrupted`` or the error that stopped the run."""
        return self.summary["status"]

    def series_frame(self) -> Any:
        """``series`` as a pandas DataFrame sharing the arrays (needs pandas)."""
        return _frame(self.series)

    def final_frame(self) -> Any:
        """``final`` as a pandas DataFrame sharing the arrays (needs pandas)."""
        if self.final is None:
            raise ValueError("this run has no final state")
        return _frame(self.final)

    def __repr__(self) -> str:
        rows = len(self.series.get("step", ()))
        return f"<rrpdem.RunResult {self.summary.get('scenario', {}).get('name')!r} {self.status}, {rows} records, out={self.out}>"


class TempFolder:
    """A temporary folder removed once nothing refers to this object any more (a study's
    ``StudyResult`` and its ``Variants`` both hold it, so either keeps the variants readable)."""

    def __init__(self, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self._remove = weakref.finalize(self, shutil.rmtree, self.path, True)

    def keep(self) -> None:
        """Leaves the folder on disk (an interrupted study's, for ``resume=True``)."""
        self._remove.detach()


class Variants(Sequence[RunResult]):
    """A study's variants' results, each read from its folder on first access."""

    def __init__(self, out: Path, count: int, tmp: Optional[TempFolder] = None) -> None:
        self._out = out
        self._cache: Dict[int, RunResult] = {}
        self._count = count
        self._tmp = tmp

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, k: Union[int, slice]) -> Any:  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._count))]
        if not -self._count <= k < self._count:
            raise IndexError(f"variant {k}: the study has {self._count}")
        k %= self._count
        if k not in self._cache:
            folder = self._out / "variants" / str(k)
            if not (folder / "summary.json").is_file():
                raise LookupError(f"variant {k} has no outputs in {folder} (it did not run)")
            self._cache[k] = RunResult.read(folder)
        return self._cache[k]

    def __iter__(self) -> Iterator[RunResult]:
        return (self[k] for k in range(self._count))


class StudyResult:
    """What a study wrote, read back: ``table`` is ``study.csv`` as ``{column: 1-D array}``
    (``variant``, the varied pointers, ``status`` and the outcome columns of docs/STUDIES.md;
    empty cells NaN); ``variants[k]`` the :class:`RunResult` of variant k, read when first
    asked for; ``failed`` ``{k: why}`` for the variants of this call that did not complete;
    ``out`` the folder (a temporary one, removed with this object, when none was given)."""

    def __init__(self, out: Path, failed: Dict[int, str], tmp: Optional[TempFolder] = None) -> None:
        self.out = out
        self.table = read_columns(out / "study.csv")
        self.failed = failed
        self.variants = Variants(out, len(self.table["variant"]), tmp)
        self._tmp = tmp

    def table_frame(self) -> Any:
        """``table`` as a pandas DataFrame sharing the arrays (needs pandas)."""
        return _frame(self.table)

    def __repr__(self) -> str:
        return f"<rrpdem.StudyResult {len(self.variants)} variants, {len(self.failed)} not completed, out={self.out}>"


def columns_of_row(header: str, row: str) -> Dict[str, Union[int, float]]:
    """One ``series.csv`` row as ``{column: value}`` (integers where the text is one)."""
    out: Dict[str, Union[int, float]] = {}
    for name, text in zip(header.split(","), row.split(",")):
        out[name] = int(text) if text.lstrip("-").isdigit() else float(text)
    return out


__all__: List[str] = ["RunResult", "StudyResult", "TempFolder", "Variants", "read_columns"]
