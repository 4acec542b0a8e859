"""Bad input raises the package's exceptions, naming the file, the field or the line as the
CLI does."""

import json
import shutil
from pathlib import Path

import pytest
import rrpdem
from conftest import SCENARIOS, cli, rupture_torus, write_json


def base():
    return json.loads((SCENARIOS / "torus_impact.json").read_text())


def test_field_named_in_dicts_and_files(tmp_path):
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(base(), dt=-1.0)
    assert e.value.field == "dt" and e.value.path == "<dict>" and "dt" in str(e.value)
    d = base()
    d["bodies"][0]["n"] = 2
    f = write_json(tmp_path / "bad.json", d)
    # Refused as the scenario is read (before: only by `generate()` or a run).
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(f)
    assert e.value.field == "bodies[0].n" and e.value.path == str(f)
    # The same message as the CLI's.
    assert str(e.value) in cli("run", f, "--out", tmp_path / "o", check=False).stderr
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(base(), bodies=[{"type": "torus_ring", "n": 0, "torus_diameter": 3}])
    assert e.value.field == "bodies[0].n"
    d = base()
    d["stiffness"]["bendin"] = 1
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(d)
    assert e.value.field == "stiffness.bendin"
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(base(), bodies=[{"type": "torus_ring", "n": "eighty", "torus_diameter": 3}])
    assert e.value.field.startswith("bodies[0]") and "n" in e.value.field
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(tmp_path / "missing.json")
    assert e.value.path == str(tmp_path / "missing.json") and e.value.field is None
    assert issubclass(rrpdem.ScenarioError, rrpdem.Error)


def test_csv_line_named(tmp_path):
    (tmp_path / "p.csv").write_text("x,y,z\n0,0,0\n1,0,oops\n")
    d = base()
    d["particle"]["diameter"] = 1
    d["bodies"] = [{"type": "csv", "particles": "p.csv"}]
    f = write_json(tmp_path / "c.json", d)
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(f).generate()
    assert e.value.line == 3 and e.value.path == str(tmp_path / "p.csv")


def test_engine_options_and_study_errors(tmp_path):
    with pytest.raises(ValueError, match="backend `tpu`"):
        rrpdem.run(SCENARIOS / "torus_impact.json", backend="tpu")
    with pytest.raises(ValueError, match="checkpoint_every"):
        rrpdem.run(SCENARIOS / "torus_impact.json", checkpoint_every=0)
    study = {"name": "s", "base": base(), "vary": {"list": [{"/dt": 1e-3}, {"/stiffness/contact": -5}]}}
    with pytest.raises(rrpdem.StudyError) as e:
        rrpdem.study(study, out=tmp_path / "s")
    assert e.value.variant == 1 and "stiffness.contact" in str(e.value)


def test_failed_run_raises_with_its_folder(tmp_path):
    # A time step far past the stability limit, forced: the energy guard stops the run; the
    # outputs up to the last good step are in the folder the error names.
    f = rupture_torus(tmp_path, name="blowup", t_end=2.0, dt=0.05, force_dt=True)
    # The step's warning comes with the failure it explains.
    with pytest.raises(rrpdem.RunError) as e, pytest.warns(rrpdem.RrpdemWarning, match="stability estimate"):
        rrpdem.run(f, out=tmp_path / "o")
    assert e.value.out == str(tmp_path / "o") and e.value.step >= 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["status"] != "completed" and summary["steps"] == e.value.step
    # Without a folder, the temporary one is kept and named.
    with pytest.raises(rrpdem.RunError) as e, pytest.warns(rrpdem.RrpdemWarning):
        rrpdem.run(f)
    assert e.value.out is not None and (Path(e.value.out) / "summary.json").is_file()
    shutil.rmtree(Path(e.value.out).parent)


def test_messages_name_python_arguments_not_command_line_flags(tmp_path):
    # Before: the library's messages said "pass --overwrite", "pass --force", "--resume": flags
    # a Python caller has no way to pass.
    f = rupture_torus(tmp_path, name="words", t_end=0.2)
    rrpdem.run(f, out=tmp_path / "o")
    with pytest.raises(rrpdem.RunError) as e:
        rrpdem.run(f, out=tmp_path / "o")
    assert "overwrite=True" in str(e.value) and "--" not in str(e.value), str(e.value)
    # A step above the stability estimate: the scenario field that runs it anyway.
    fast = rupture_torus(tmp_path, name="fast", t_end=0.2, dt=0.05)
    with pytest.raises(rrpdem.RunError) as e:
        rrpdem.run(fast)
    assert "force_dt=True" in str(e.value) and "--" not in str(e.value), str(e.value)
    # A study folder that holds variants already: resume=True or overwrite=True.
    study = {"name": "w", "base": str(f), "vary": {"list": [{}, {"/t_end": 0.1}]}}
    rrpdem.study(study, out=tmp_path / "s")
    with pytest.raises(rrpdem.StudyError) as e:
        rrpdem.study(study, out=tmp_path / "s")
    assert "resume=True" in str(e.value) and "overwrite=True" in str(e.value), str(e.value)
    assert "--" not in str(e.value), str(e.value)


def test_dict_errors_cite_no_positions_of_generated_json():
    # Before: "… at line 1 column 540", a position in the JSON text the package made of the dict.
    d = base()
    d["gravity"] = None
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(d)
    msg = str(e.value)
    assert e.value.field == "gravity" and "leave the field out" in msg and " at line " not in msg, msg
    d = base()
    d["dt"] = "fast"
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(d)
    assert e.value.field == "dt" and "expected f64" in str(e.value) and "column" not in str(e.value), str(e.value)


def test_resume_of_a_missing_folder_says_so(tmp_path):
    with pytest.raises(rrpdem.RunError) as e:
        rrpdem.resume(tmp_path / "nope")
    assert "no such folder" in str(e.value) and "rrpdem.resume takes" in str(e.value), str(e.value)
