"""Scenarios from a file, a dict or keyword arguments, parsed and validated by the library's own
parser (errors are :class:`rrpdem.ScenarioError` naming the file and field, as on the CLI)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from . import _native

PathLike = Union[str, "os.PathLike[str]"]

#: What a scenario given as a dict is called in errors (its relative CSV paths are taken from
#: the working folder), unless ``path=`` names it.
DICT_NAME = "<dict>"


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as the JSON numbers and lists they hold."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} {value!r} cannot be written into a scenario (JSON)")


def _non_finite(obj: Any, at: str = "") -> Optional[str]:
    """The field (`a.b[2]`) of the first NaN or infinite number in `obj`, if any."""
    if isinstance(obj, float) or (hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0):
        try:
            return None if math.isfinite(float(obj)) else (at or "(the value)")
        except (TypeError, ValueError):
            return None
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            found = _non_finite(v, f"{at}.{k}" if at else str(k))
            if found:
                return found
    elif isinstance(obj, (list, tuple)) or hasattr(obj, "tolist"):
        items = obj.tolist() if hasattr(obj, "tolist") else obj
        if not isinstance(items, list):
            return _non_finite(items, at)
        for i, v in enumerate(items):
            found = _non_finite(v, f"{at}[{i}]")
            if found:
                return found
    return None


def dumps(obj: Any, named: str = DICT_NAME, study: bool = False) -> str:
    """JSON text of a scenario or study dict (numpy values allowed; NaN and infinity refused:
    a :class:`rrpdem.ScenarioError`, or :class:`rrpdem.StudyError` for a study, naming the
    field, as the CLI's reader refuses them)."""
    try:
        return json.dumps(obj, default=_plain, allow_nan=False)
    except ValueError:
        field = _non_finite(obj)
        if field is None:
            raise
        message = f"{named}: field `{field}`: expected a finite number (JSON has no NaN or infinity)"
        err = (_native.StudyError if study else _native.ScenarioError)(message)
        err.path = Path(named)
        if study:
            err.variant = None
        else:
            err.field, err.line = field, None
        raise err from None


class _NotPlain(Exception):
    """A scenario file that Python's JSON reader would read more loosely than the library's."""


def _read_strict(path: PathLike) -> Optional[Dict[str, Any]]:
    """The JSON object in `path` as the library reads it, or None where that reader would
    refuse it or read it otherwise (a field given twice, NaN or Infinity, bad JSON, no object):
    the caller then lets the library say why, as ``Scenario(path)`` does."""

    def pairs(items: List[Any]) -> Dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise _NotPlain()
        return dict(items)

    def constant(_: str) -> Any:
        raise _NotPlain()

    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.load(f, object_pairs_hook=pairs, parse_constant=constant)
    except (_NotPlain, ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None


class Scenario:
    """A validated rrpdem scenario (docs/SCENARIOS.md lists every field).

    ``Scenario("scenarios/torus_impact.json")`` reads a file; ``Scenario({...})`` takes a dict;
    ``Scenario(name="x", dt=1e-3, ...)`` takes the fields as keyword arguments; keyword
    arguments given with a file, a dict or another scenario replace those top-level fields
    (``Scenario("torus_impact.json", t_end=0.5)``). ``path`` names a dict in errors and anchors
    its relative CSV paths (default: ``"<dict>"`` in the working folder).

    Raises :class:`rrpdem.ScenarioError` (with ``path``, ``field`` and ``line``) for anything
    the CLI would refuse. The geometry itself (CSV files, generated bodies, coincident
    particles) is checked when the model is built: :meth:`generate`, or a run.
    """

    __slots__ = ("_inner",)

    def __init__(
        self,
        source: Union[None, PathLike, Mapping[str, Any], "Scenario"] = None,
        /,
        *,
        path: Optional[PathLike] = None,
        **fields: Any,
    ) -> None:
        if isinstance(source, Scenario):
            if not fields and path is None:
                self._inner = source._inner
                return
            data: Dict[str, Any] = source.to_dict()
            named = path if path is not None else source.source
        elif isinstance(source, Mapping):
            data = dict(source)
            named = path if path is not None else DICT_NAME
        elif source is None:
            data = {}
            named = path if path is not None else DICT_NAME
        elif isinstance(source, (str, os.PathLike)):
            if not fields:
                self._inner = _native._Scenario.load(os.fspath(source))
                return
            data = _read_strict(source)
            if data is None:
                # The library's parser gives the CLI's message (a file that is no object, a
                # field given twice, NaN, bad JSON), naming the file, field and line.
                self._inner = _native._Scenario.load(os.fspath(source))
                data = self.to_dict()
            named = source
        else:
            raise TypeError(f"a scenario is a file name, a dict or a Scenario, not {type(source).__name__}")
        data.update(fields)
        self._inner = _native._Scenario.from_json(dumps(data, os.fspath(named)), os.fspath(named))

    @classmethod
    def _wrap(cls, inner: "_native._Scenario") -> "Scenario":
        s = cls.__new__(cls)
        s._inner = inner
        return s

    @property
    def name(self) -> str:
        """The scenario's name (its default output folder's name)."""
        return self._inner.name

    @property
    def source(self) -> Path:
        """The file it was read from (``"<dict>"`` for a dict): its folder anchors CSV paths."""
        return Path(self._inner.source)

    @property
    def dt(self) -> float:
        """The time step."""
        return self._inner.dt

    @property
    def t_end(self) -> float:
        """The end time (the run takes ``total_steps`` steps of ``dt``)."""
        return self._inner.t_end

    @property
    def total_steps(self) -> int:
        """Steps of a run: ``round(t_end / dt)``."""
        return self._inner.total_steps

    @property
    def record_interval(self) -> int:
        """Steps between the rows of ``series.csv``."""
        return self._inner.record_interval

    def to_json(self) -> str:
        """The scenario as JSON with every default written out: read back with the same
        ``path`` (``Scenario(json.loads(t.to_json()), path=t.source)``), an equal scenario."""
        return self._inner.to_json()

    def to_dict(self) -> Dict[str, Any]:
        """The scenario as a dict with every default written out (``Scenario(t.to_dict(),
        path=t.source) == t``)."""
        return json.loads(self.to_json())

    def save(self, path: PathLike) -> Path:
        """Writes :meth:`to_json` to ``path`` (relative CSV paths then resolve from its folder)."""
        p = Path(path)
        p.write_text(self.to_json() + "\n", encoding="utf-8")
        return p

    def replace(self, **fields: Any) -> "Scenario":
        """A copy with the given top-level fields replaced (validated again)."""
        return Scenario(self, **fields)

    def generate(self) -> Dict[str, Any]:
        """Builds the model as a run does and returns its arrays, in the scenario's numbering.

        ``positions``, ``velocities``, ``angular_velocities`` (n, 3); ``attitudes`` (n, 4) as
        (qw, qx, qy, qz); ``masses``, ``inertias``, ``diameters`` (n,); ``fixed`` (n,) bool;
        ``bonds`` (m, 2) particle indices; ``bond_rest_lengths`` (m,).
        """
        return self._inner.generate()

    def __eq__(self, other: object) -> bool:
        """Equal fields and the same :attr:`source` (whose folder anchors relative CSV paths, so
        the same fields from another file can name other particles)."""
        if not isinstance(other, Scenario):
            return NotImplemented
        return self._inner == other._inner

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        return f"rrpdem.Scenario({self.name!r}, dt={self.dt!r}, t_end={self.t_end!r}, source={str(self.source)!r})"


def as_scenario(scenario: Union[PathLike, Mapping[str, Any], Scenario]) -> Scenario:
    """A :class:`Scenario` from whatever the API functions accept for one."""
    return scenario if isinstance(scenario, Scenario) else Scenario(scenario)
