"""docs/PYTHON.md's worked example runs as written (its code blocks, in order, in a scratch
folder that sees the repository's scenarios) and prints what the document shows."""

import contextlib
import io
import os
import re

import pytest
from conftest import REPO

DOC = REPO / "docs" / "PYTHON.md"


def example_blocks():
    text = DOC.read_text()
    part = text[text.index("## Worked example"):text.index("## What the Python layer costs")]
    code = re.findall(r"```python\n(.*?)```", part, re.S)
    shown = re.findall(r"```text\n(.*?)```", part, re.S)
    return code, shown


def test_worked_example_runs_as_documented(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    code, shown = example_blocks()
    assert len(code) == 3 and len(shown) == 2
    os.symlink(REPO / "scenarios", tmp_path / "scenarios")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    scope = {}
    with contextlib.redirect_stdout(printed):
        for block in code:
            exec(compile(block, str(DOC), "exec"), scope)
    # What the document says the example prints is what it prints.
    assert printed.getvalue() == "".join(shown)
    assert (tmp_path / "impact_speed.png").stat().st_size > 10_000
    assert (tmp_path / "energy_v4.png").stat().st_size > 10_000
