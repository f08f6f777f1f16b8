"""Every code block of docs/authoring.md runs, in order."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "authoring.md"
BLOCK = re.compile(r"^```(python|sh)\n(.*?)^```", re.S | re.M)


def blocks():
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def test_the_tutorial_has_code():
    kinds = [kind for kind, _ in blocks()]
    assert kinds.count("python") >= 8 and kinds.count("sh") >= 2


def test_every_code_block_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "authoring_doc"}
    for number, (kind, code) in enumerate(blocks(), 1):
        if kind == "python":
            exec(compile(code, f"{DOC}:block{number}", "exec"), namespace)
        else:
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", code],
                capture_output=True, text=True, cwd=tmp_path, env=os.environ.copy(),
            )
            assert result.returncode == 0, f"block {number}:\n{code}\n{result.stderr}"
