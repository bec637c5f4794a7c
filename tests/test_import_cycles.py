"""No circle of imports between the project's modules (read with `ast`: nothing is imported).

A circle means two files cannot be understood, tested or changed apart; the usual one here was a
helper typed against the object that calls it (`if TYPE_CHECKING: from ...loop import Server`).
What counts as an import is documented in import_graph.py. The fixtures below build small
packages with circles on purpose, so the check is shown to fail where it must.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from import_graph import build_graph

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["protos", "checkpoint", "talker_service", "vocoder_service", "gateway", "kernels", "client",
            "launcher", "service_common", "benchmarks"]


def test_every_package_is_scanned():
    graph = build_graph(ROOT, PACKAGES)
    scanned = {name.split(".")[0] for name in graph.files}
    assert scanned == set(PACKAGES), f"packages without an __init__.py are not scanned: {set(PACKAGES) - scanned}"
    assert len(graph.files) > 150   # the tree has ~200 modules: a broken walk would find few


def test_project_has_no_import_cycles():
    graph = build_graph(ROOT, PACKAGES)
    cycles = graph.cycles()
    assert not cycles, "import circles between project modules:\n" + "\n".join(graph.describe(c) for c in cycles)


# ---- the check itself, on packages built for it --------------------------------------------------

def write_package(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def cycles_in(root: Path, files: dict[str, str]) -> list[list[str]]:
    write_package(root, files)
    return build_graph(root, ["pkg"]).cycles()


def test_two_modules_importing_each_other_are_a_cycle(tmp_path):
    cycles = cycles_in(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "import pkg.a\n\ndef helper():\n    pass\n",
    })
    assert cycles == [["pkg.a", "pkg.b", "pkg.a"]]
    graph = build_graph(tmp_path, ["pkg"])
    message = graph.describe(cycles[0])
    assert str(tmp_path / "pkg" / "a.py") in message and str(tmp_path / "pkg" / "b.py") in message


def test_three_module_circle_is_found(tmp_path):
    cycles = cycles_in(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",               # `from package import module`
        "pkg/b.py": "from .sub.c import thing\n",       # relative, into a subpackage
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from .. import a\nthing = 1\n",  # two levels up
    })
    assert cycles == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]


@pytest.mark.parametrize("hidden_import", [
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.loop import Server\n",
    "def later():\n    from pkg.loop import Server\n    return Server\n",
])
def test_type_checking_and_function_level_imports_count(tmp_path, hidden_import):
    cycles = cycles_in(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/loop.py": "from pkg.helper import run\n",
        "pkg/helper.py": hidden_import,
    })
    assert cycles == [["pkg.helper", "pkg.loop", "pkg.helper"]]


def test_shared_dependencies_and_reexporting_inits_are_not_cycles(tmp_path):
    cycles = cycles_in(tmp_path, {
        # the __init__ re-exports its submodules, which import each other through full names
        "pkg/__init__.py": "from pkg.a import A\nfrom pkg.b import B\n",
        "pkg/a.py": "from pkg.base import Base\nimport json\n\nclass A(Base):\n    pass\n",
        "pkg/b.py": "from pkg.base import Base\nfrom pkg.a import A\n\nclass B(Base):\n    pass\n",
        "pkg/base.py": "class Base:\n    pass\n",
    })
    assert cycles == []
