"""Scenarios from a file, a dict or keyword arguments, parsed and validated by the library's own
parser (errors are :class:`rrpdem.ScenarioError` naming the file and field, as on the CLI)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

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


def dumps(obj: Any) -> str:
    """JSON text of a scenario or study dict (numpy values allowed; NaN and infinity refused)."""
    return json.dumps(obj, default=_plain, allow_nan=False)


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
            with open(source, encoding="utf-8-sig") as f:
                data = json.load(f)
            if not isinstance(data, dict):
                # The library's parser gives the CLI's message for a file that is no object.
                self._inner = _native._Scenario.load(os.fspath(source))
                return
            named = source
        else:
            raise TypeError(f"a scenario is a file name, a dict or a Scenario, not {type(source).__name__}")
        data.update(fields)
        self._inner = _native._Scenario.from_json(dumps(data), os.fspath(named))

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
        return self._inner.dt

    @property
    def t_end(self) -> float:
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
        """The scenario as JSON with every default written out (reads back as an equal scenario)."""
        return self._inner.to_json()

    def to_dict(self) -> Dict[str, Any]:
        """The scenario as a dict with every default written out."""
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
