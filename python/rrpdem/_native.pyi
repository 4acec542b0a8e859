"""Type stubs of the native module (Rust, pyo3) under the rrpdem package. The public API is
the package itself (rrpdem/__init__.py, annotated); these are its building blocks."""

from os import PathLike
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

_Path = Union[str, PathLike[str]]

__version__: str

class Error(Exception):
    """Base class of the errors rrpdem raises."""

class ScenarioError(Error):
    """A scenario that cannot be read, parsed or validated."""
    path: str
    field: Optional[str]
    line: Optional[int]

class StudyError(Error):
    """A study that cannot be resolved, or whose output folder cannot be used."""
    path: str
    variant: Optional[int]

class RunError(Error):
    """A run that failed; `out` holds its outputs up to the last good step `step`."""
    out: Optional[str]
    step: Optional[int]

class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run; its outputs and checkpoint are in `out`."""
    out: str
    step: int
    t: float

class _Scenario:
    @staticmethod
    def from_json(text: str, path: _Path) -> _Scenario: ...
    @staticmethod
    def load(path: _Path) -> _Scenario: ...
    def to_json(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def dt(self) -> float: ...
    @property
    def t_end(self) -> float: ...
    @property
    def total_steps(self) -> int: ...
    @property
    def record_interval(self) -> int: ...
    def generate(self) -> Dict[str, np.ndarray]: ...
    def __eq__(self, other: object) -> bool: ...

class _Engine:
    def __init__(self, scenario: _Scenario, backend: Optional[str] = None, precision: Optional[str] = None) -> None: ...
    def advance(self, steps: int) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def n_particles(self) -> int: ...
    @property
    def n_bonds(self) -> int: ...
    def info(self) -> Tuple[str, str, str]: ...
    def warnings(self) -> List[str]: ...
    def resorts(self) -> List[Tuple[int, float]]: ...
    def scenario_json(self) -> str: ...
    def diagnostics_row(self) -> Tuple[str, str]: ...
    def state(self) -> Dict[str, np.ndarray]: ...
    def take_breaks(self) -> Dict[str, Any]: ...
    def clumps(self) -> Dict[str, np.ndarray]: ...
    def tangential_displacement(self) -> Optional[np.ndarray]: ...

def run(
    scenario: _Scenario,
    out: _Path,
    overwrite: bool = False,
    backend: Optional[str] = None,
    precision: Optional[str] = None,
    progress: bool = False,
    checkpoint_every: Optional[int] = None,
    vtk_every: Optional[int] = None,
) -> List[str]: ...
def resume(
    dir: _Path,
    t_end: Optional[float] = None,
    scenario: Optional[_Scenario] = None,
    progress: bool = False,
    checkpoint_every: Optional[int] = None,
    vtk_every: Optional[int] = None,
) -> List[str]: ...
def study(
    source: str,
    out: _Path,
    text: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    backend: Optional[str] = None,
    precision: Optional[str] = None,
    gpu_memory: Optional[int] = None,
    progress: bool = False,
    vtk_every: Optional[int] = None,
) -> List[Tuple[int, Optional[str]]]: ...
def bench(
    cases: List[str],
    engines: List[str],
    threads: List[int],
    steps: int = 100,
    min_seconds: float = 2.0,
    bandwidth: Optional[float] = None,
    stages: bool = False,
) -> str: ...
def plot_run(dir: _Path) -> List[str]: ...
def read_csv(path: _Path) -> Dict[str, Union[np.ndarray, List[str]]]: ...
def final_from_checkpoint(dir: _Path) -> Dict[str, np.ndarray]: ...
