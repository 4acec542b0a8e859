"""rrpdem from Python: scenarios, runs, studies and a step-wise engine of the rrpdem
discrete-element solver, with results as numpy arrays.

The package is a thin layer over the same Rust library as the ``rrpdem`` command line: a run
goes through the CLI's run driver and writes the CLI's output folder (a temporary one unless
``out`` is given), which is read back bit for bit. The guide is docs/PYTHON.md::

    import rrpdem
    result = rrpdem.run("scenarios/torus_impact.json")
    result.series["E"], result.summary["impact"]["restitution"]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

# Mesa's device-select Vulkan layer prints an "XDG_RUNTIME_DIR is invalid" line for every Vulkan
# instance on headless machines; the engine picks adapters itself, so the layer is switched off
# (as .cargo/config.toml does for cargo), unless the caller set the variable.
os.environ.setdefault("NODEVICE_SELECT", "1")

from . import _native  # noqa: E402
from ._native import Error, RunError, RunInterrupted, ScenarioError, StudyError  # noqa: E402
from ._results import RunResult, StudyResult, TempFolder, Variants, columns_of_row, read_columns  # noqa: E402
from ._scenario import Scenario, as_scenario, dumps  # noqa: E402

__version__: str = _native.__version__

PathLike = Union[str, "os.PathLike[str]"]
ScenarioLike = Union[PathLike, Mapping[str, Any], Scenario]


class RrpdemWarning(UserWarning):
    """What a run announces that is not an error (a time step near the stability limit, a
    precision fallback): the CLI's ``warning:`` and ``note:`` lines."""


def _announce(messages: Sequence[str]) -> None:
    for m in messages:
        for lead in ("warning: ", "note: "):
            if m.startswith(lead):
                warnings.warn(m[len(lead):], RrpdemWarning, stacklevel=3)


def _progress(progress: Optional[bool]) -> bool:
    return sys.stderr.isatty() if progress is None else bool(progress)


def run(
    scenario: ScenarioLike,
    *,
    backend: Optional[str] = None,
    precision: Optional[str] = None,
    out: Optional[PathLike] = None,
    overwrite: bool = False,
    progress: Optional[bool] = None,
    checkpoint_every: Optional[int] = None,
    vtk_every: Optional[int] = None,
    plots: bool = False,
) -> RunResult:
    """Runs a scenario from t = 0 as ``rrpdem run`` does and returns its results.

    ``scenario``: a :class:`Scenario`, a scenario file or a dict. ``backend`` (``"auto"``,
    ``"cpu"``, ``"gpu"``) and ``precision`` (``"f32"``, ``"f64"``) override the scenario's, as
    ``--backend``/``--precision`` do. ``out``: the output folder (``series.csv``,
    ``final_state.csv``, ``summary.json``, …), refused if it holds an earlier run unless
    ``overwrite``; None: a temporary folder, removed once the results are read (then
    ``result.out`` is None). ``progress``: a progress bar on stderr (default: when stderr is a
    terminal). ``checkpoint_every``, ``vtk_every``, ``plots``: as ``--checkpoint-every``,
    ``--vtk-every``, ``--plots`` (``plots`` needs ``out``: a temporary folder takes its figures
    with it).

    The engine runs with the interpreter lock released. Ctrl-C stops it after the current chunk
    of steps; every output is written, with a checkpoint, before :class:`RunInterrupted` (a
    ``KeyboardInterrupt``; ``.out`` names the folder, kept even when temporary) is raised.
    A failed run raises :class:`RunError` (``.out``: its outputs up to the last good step;
    ``.messages``: what the run announced, whose warnings are issued first);
    a bad scenario :class:`ScenarioError`.
    """
    s = as_scenario(scenario)
    if plots and out is None:
        # The figures would be drawn into the temporary folder and removed with it.
        raise ValueError("plots=True draws the figures into the run's folder: give out=… (without it the "
                         "folder is temporary and removed once the results are read)")
    tmp = None
    if out is None:
        tmp = tempfile.mkdtemp(prefix="rrpdem-")
        folder = Path(tmp) / s.name
    else:
        folder = Path(out)
    try:
        said = _native.run(s._inner, os.fspath(folder), overwrite, backend, precision, _progress(progress),
                           checkpoint_every, vtk_every)
    except BaseException as e:
        # A failed or interrupted run keeps its folder (temporary or not) where the exception
        # names it; a temporary folder nothing was written into goes. What the run announced
        # before (a time step near its limit) is issued too: it often explains the failure.
        if tmp is not None and getattr(e, "out", None) is None:
            shutil.rmtree(tmp, ignore_errors=True)
        _announce(getattr(e, "messages", ()))
        raise
    _announce(said)
    if plots:
        _native.plot_run(os.fspath(folder))
    result = RunResult.read(folder, said)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        result.out = None
    return result


def resume(
    dir: PathLike,
    *,
    t_end: Optional[float] = None,
    scenario: Optional[ScenarioLike] = None,
    progress: Optional[bool] = None,
    checkpoint_every: Optional[int] = None,
    vtk_every: Optional[int] = None,
) -> RunResult:
    """Continues the run in ``dir`` from its ``checkpoint.bin`` as ``rrpdem resume`` does, bit
    for bit, to its end or to ``t_end``; with ``scenario``, refused unless the checkpoint is that
    scenario's. Returns the folder's results; Ctrl-C as in :func:`run`."""
    check = None if scenario is None else as_scenario(scenario)._inner
    try:
        said = _native.resume(os.fspath(dir), t_end, check, _progress(progress), checkpoint_every, vtk_every)
    except BaseException as e:
        _announce(getattr(e, "messages", ()))
        raise
    _announce(said)
    return RunResult.read(dir, said)


def study(
    study: Union[PathLike, Mapping[str, Any]],
    *,
    out: Optional[PathLike] = None,
    overwrite: bool = False,
    resume: bool = False,
    backend: Optional[str] = None,
    precision: Optional[str] = None,
    gpu_memory: Optional[int] = None,
    progress: Optional[bool] = None,
    vtk_every: Optional[int] = None,
) -> StudyResult:
    """Runs a study (docs/STUDIES.md) as ``rrpdem study`` does and returns its table and,
    lazily, each variant's results.

    ``study``: a study file or a dict (whose relative paths, ``base`` and CSV bodies, are taken
    from the working folder). ``out``: the study's folder (``study.json``, ``study.csv``,
    ``variants/<k>/``); None: a temporary folder that lives as long as the result. ``overwrite``
    and ``resume`` as ``--overwrite`` and ``--resume``; ``backend``, ``precision``,
    ``gpu_memory`` as the CLI's options. Variants that fail do not raise: ``result.failed`` and
    the table's ``status`` column say which. Ctrl-C stops the running batch (each variant with a
    checkpoint), writes ``study.csv`` and raises ``KeyboardInterrupt`` whose ``.out`` names the
    study's folder (kept even when temporary); ``study(…, out=e.out, resume=True)`` continues.
    """
    if isinstance(study, Mapping):
        text, source, name = dumps(dict(study), study=True), None, study.get("name")
    else:
        text, source = None, os.fspath(study)
        name = None
        if out is None:
            # Only to name the temporary folder: a file that cannot be read is the study's
            # reader's to refuse (a StudyError naming it), as with ``out``.
            try:
                with open(source, encoding="utf-8-sig") as f:
                    doc = json.load(f)
                name = doc.get("name") if isinstance(doc, dict) else None
            except (OSError, ValueError):
                pass
    tmp = None
    if out is None:
        tmp = TempFolder("rrpdem-study-")
        folder = tmp.path / str(name or "study")
    else:
        folder = Path(out)
    try:
        ran = _native.study(text if text is not None else source, os.fspath(folder), text is not None, overwrite,
                            resume, backend, precision, gpu_memory, _progress(progress), vtk_every)
    except KeyboardInterrupt as e:
        # The interrupted study's checkpoints and study.csv are what resume=True continues from:
        # its folder stays, even a temporary one, and the exception names it.
        if tmp is not None and folder.exists():
            tmp.keep()
        if getattr(e, "out", None) is None and folder.exists():
            e.out = folder
        raise
    failed = {k: why for k, why in ran if why is not None}
    return StudyResult(folder, failed, tmp)


def bench(
    cases: Union[str, Iterable[str]] = ("torus", "rings-1e5", "fcc-1e5"),
    *,
    engines: Union[str, Iterable[str]] = ("cpu",),
    threads: Union[int, Iterable[int]] = (1,),
    steps: int = 100,
    min_seconds: float = 2.0,
    bandwidth: Optional[float] = None,
    stages: bool = False,
) -> Dict[str, Any]:
    """Measures the throughput of the bench cases (docs/BENCHMARKS.md) as ``rrpdem bench``
    does and returns its report: date, machine, and ``measurements`` (one dict per case, engine
    and thread count: ``particle_steps_per_s``, ``bond_steps_per_s``, …). ``cases``: names such
    as ``"torus"``, ``"rings-1e5"``, ``"fcc-1e6"`` or ``"standard"``; ``engines``: ``"cpu"``,
    ``"gpu-f32"``, ``"gpu-f64"``."""
    as_list = lambda v: [v] if isinstance(v, (str, int)) else list(v)  # noqa: E731
    report = _native.bench(as_list(cases), as_list(engines), as_list(threads), steps, min_seconds, bandwidth, stages)
    return json.loads(report)


class Engine:
    """A scenario's model on the engine ``rrpdem run`` would build for it, stepped from Python.

    ``Engine(scenario, backend=…, precision=…)`` builds the model (checks and particle order as
    a run's); :meth:`advance` takes steps with the interpreter lock released; :meth:`state`,
    :meth:`diagnostics` and :meth:`take_breaks` read it back as numpy arrays (copies) in the
    scenario's numbering. Stepped to the same steps, it gives a run's ``series.csv`` rows (but
    ``E_scale`` and the fragment columns) and ``final_state.csv`` bit for bit. It keeps no
    energy guard and writes nothing: a loop of the user's decides what to check and keep.
    """

    def __init__(self, scenario: ScenarioLike, *, backend: Optional[str] = None,
                 precision: Optional[str] = None) -> None:
        self.scenario = as_scenario(scenario)
        self._e = _native._Engine(self.scenario._inner, backend, precision)
        _announce(["warning: " + w for w in self._e.warnings()])

    def advance(self, steps: int) -> int:
        """Takes ``steps`` steps; returns how many were taken. Ctrl-C stops after the current
        chunk (the engine is then at a whole step) and raises ``KeyboardInterrupt``. An engine
        failure (non-finite state, …) raises :class:`RunError`."""
        return self._e.advance(steps)

    @property
    def steps(self) -> int:
        """Steps taken since t = 0."""
        return self._e.steps

    @property
    def t(self) -> float:
        """The time of the current step (as ``series.csv`` gives it)."""
        return float(self.diagnostics()["t"])

    @property
    def n_particles(self) -> int:
        """Particles of the model (as a run's, clump spheres included)."""
        return self._e.n_particles

    @property
    def n_bonds(self) -> int:
        """Bonds of the model, intact or broken."""
        return self._e.n_bonds

    @property
    def info(self) -> Dict[str, str]:
        """``backend``, ``device`` and ``precision`` of the engine."""
        backend, device, precision = self._e.info()
        return {"backend": backend, "device": device, "precision": precision}

    @property
    def resorts(self) -> List[tuple]:
        """The re-sorts of the particle order so far, as ``(step, scatter)``."""
        return self._e.resorts()

    def warnings(self) -> List[str]:
        """What the engine warns of so far (a precision fallback, a re-sort not made), as a run's
        ``summary.json`` lists them."""
        return self._e.warnings()

    def state(self) -> Dict[str, np.ndarray]:
        """The state at the current step, in ``final_state.csv``'s columns (``id``, ``x`` …
        ``z``, ``vx`` … ``vz``, ``qw`` … ``qz`` with qw ≥ 0, ``wx`` … ``wz``, ``mass``,
        ``inertia``, ``diameter``, ``fixed``, ``fragment``)."""
        return dict(self._e.state())

    def positions(self) -> np.ndarray:
        """The current positions as an (n, 3) array."""
        s = self._e.state()
        return np.column_stack([s["x"], s["y"], s["z"]])

    def diagnostics(self) -> Dict[str, Union[int, float]]:
        """Energies, momenta and wall force at the current step, under ``series.csv``'s column
        names (``step``, ``t``, ``E``, ``E_trans``, … ``v_cm_z``, ``E_dissipated``), as the run
        writes them; not ``E_scale`` (the run's energy guard's) nor the fragment columns (the
        run's labelling of its pieces)."""
        header, row = self._e.diagnostics_row()
        return columns_of_row(header, row)

    def clumps(self) -> Dict[str, np.ndarray]:
        """Every rigid clump's state at the current step (MODEL §12; ``lgvi``) in ``clumps.csv``'s
        columns but ``step`` and ``t``: ``clump``, ``x`` … ``z`` (centre), ``v_x`` … ``v_z``,
        ``q_w`` … ``q_z`` (attitude, q_w ≥ 0), ``omega_x`` … ``omega_z`` (spatial Ω). Empty arrays
        for a model without clumps."""
        return dict(self._e.clumps())

    def tangential_displacement(self) -> Optional[np.ndarray]:
        """With friction (MODEL §10): each particle's largest tangential displacement |ξ| over
        its frictional contacts after the last force evaluation (length units; 0 without one),
        by particle index: the field VTK frames carry as ``tangential_displacement``. A sliding
        contact without a dashpot sits at 2 μ s / (3 κ) (s its overlap). ``None`` without
        friction."""
        return self._e.tangential_displacement()

    def take_breaks(self) -> Dict[str, np.ndarray]:
        """The bonds broken since the last call, in ``breaks.csv``'s columns."""
        d = dict(self._e.take_breaks())
        d["mode"] = np.array(d["mode"], dtype=str)
        return d

    def __repr__(self) -> str:
        i = self.info
        return f"<rrpdem.Engine {self.scenario.name!r} {i['backend']}/{i['precision']} step {self.steps}>"


__all__ = [
    "Engine",
    "Error",
    "RrpdemWarning",
    "RunError",
    "RunInterrupted",
    "RunResult",
    "Scenario",
    "ScenarioError",
    "StudyError",
    "StudyResult",
    "Variants",
    "bench",
    "read_columns",
    "resume",
    "run",
    "study",
]
