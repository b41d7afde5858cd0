"""A part's record is checked when it registers: a part outside the package (examples/align_uniform.py
with one declaration taken out or changed) that has no citation, a citation without a ``title``, no
``display_name``, no ``docs``, flags that are not a dataclass, a flag named as one of the run's shared
arguments, or the name of a method of the package is refused before any work, in one ``error:`` line
and a ``hint:``, with exit status 2 and nothing written.

In this process the file registers into a copy of the registry that is put back afterwards; as a
command, it runs in a subprocess, as a user runs it (tests/test_extending.py says why).
"""

import os
import subprocess
import sys

import pytest

from cse import composition, registry

from .conftest import REPO, WIKI_HEAD, import_example, refusal

EXAMPLE = os.path.join(REPO, "examples", "align_uniform.py")
HINT = "  hint: see docs/extending.md: what a part declares"
NO_CITATION = "error: part 'align_uniform' has no citation with a title (a BibTeX entry: the model card cites it)"
# case -> (the start of the one line taken out of the example, the refusal's first line or its start)
CASES = {
    "no citation": ("    citation = CITATION", NO_CITATION),
    "a citation without a title": ("  title = {", NO_CITATION),
    "no display_name": (
        "    display_name = ",
        "error: part 'align_uniform' has no display_name (the model card's name for it)",
    ),
    "no docs": ("    docs = ", "error: part 'align_uniform' has no docs (its documentation page, a path or address)"),
    "flags that are not a dataclass": (
        "@dataclass\n",
        "error: part 'align_uniform': Flags must be a dataclass of its flags, got <class '",
    ),
    # lines changed, not taken out: (the start of the line, what replaces it, the refusal)
    "a flag named as a shared argument": (
        "    align_weight: float = field(",
        "    temp: float = field(default=1.0)\n",
        "error: part 'align_uniform': its flag temp has the name of a shared argument (--temp)",
    ),
    "the name of a method of the package": (
        '    name = "align_uniform"',
        '    name = "mixcse"\n',
        "error: two parts are named 'mixcse': ",
    ),
}


def broken_example(directory, case) -> str:
    """The example with the line of ``case`` taken out or replaced, written to ``directory``."""
    prefix, *replacement, _ = CASES[case]
    with open(EXAMPLE, encoding="utf-8") as f:
        lines = f.readlines()
    assert sum(line.startswith(prefix) for line in lines) == 1, f"the example has no single line starting {prefix!r}"
    kept = [(replacement[0] if replacement else "") if line.startswith(prefix) else line for line in lines]
    path = os.path.join(directory, "my_part.py")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(kept)
    return path


def run_argv(tiny_bert, out):
    argv = ["--parts", "align_uniform", "--model_name_or_path", tiny_bert, "--output_dir", str(out)]
    return argv + ["--train_file", WIKI_HEAD, "--use_cpu", "true"]


def check_refusal(lines, case, out):
    first = CASES[case][-1]
    assert lines[0] == first if first.endswith(")") else lines[0].startswith(first), lines
    assert lines[1:] == [HINT]
    assert not os.path.exists(out)


@pytest.mark.parametrize("case", list(CASES))
def test_a_part_lacking_a_declaration_is_refused_when_its_file_runs(tiny_bert, tmp_path, monkeypatch, capsys, case):
    """Imported as its ``python my_part.py`` imports it, then composition.main through run_cli."""
    monkeypatch.setattr(registry, "_PROBLEMS", [])
    import_example(monkeypatch, broken_example(tmp_path, case))
    out = tmp_path / "out"
    check_refusal(refusal(capsys, composition.main, run_argv(tiny_bert, out)), case, out)


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(CASES))
def test_a_part_lacking_a_declaration_is_refused_as_a_command(tiny_bert, tmp_path, case):
    """``python my_part.py --parts align_uniform ...`` outside the checkout: exit status 2, the two
    lines and nothing else on stderr, nothing written."""
    script = broken_example(tmp_path, case)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, script, *run_argv(tiny_bert, out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    check_refusal(proc.stderr.splitlines(), case, out)
