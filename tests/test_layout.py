"""The test suite's layout: no test module imports from another one. What several modules share lives
in tests/conftest.py, so that each module can run, move or be deleted on its own."""

import ast
import glob
import os

from .conftest import REPO


def imported_test_modules(source: str) -> list[str]:
    """The test modules (``test_*``) that ``source`` imports, however it names them: ``from .test_x``,
    ``from tests.test_x``, ``from . import test_x``, ``import tests.test_x``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            paths = [node.module] if node.module else [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            paths = [alias.name for alias in node.names]
        else:
            continue
        found += [path for path in paths if any(part.startswith("test_") for part in path.split("."))]
    return found


def test_the_checker_finds_every_form_of_import():
    source = "\n".join(
        [
            "from .test_inputs import refusal",
            "from tests.test_reliability import tail_args",
            "from . import test_plots",
            "import tests.test_bench",
            "from .conftest import REPO",
            "import os.path",
            "def f():\n    from .test_docs import DOCS",
        ]
    )
    assert sorted(imported_test_modules(source)) == [
        "test_docs",
        "test_inputs",
        "test_plots",
        "tests.test_bench",
        "tests.test_reliability",
    ]


def test_no_test_module_imports_another():
    paths = sorted(glob.glob(os.path.join(REPO, "tests", "test_*.py")))
    assert len(paths) > 40
    imports = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            found = imported_test_modules(f.read())
        if found:
            imports[os.path.basename(path)] = found
    assert not imports, f"move what these share into tests/conftest.py: {imports}"
