"""CI runs the README's test command: the one command under "## Run the tests" is a line of .ci/run."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_run_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run the tests", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert commands == ["bash scripts/test.sh"], commands
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands[0] in ci_lines
    assert "pytest" in (ROOT / "scripts" / "test.sh").read_text()
