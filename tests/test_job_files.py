"""Jobs given as path/to/file.py:Class: each file is its own module (named by its resolved path), and its runs
are named by the file's stem, whatever files with that stem the process imported before."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
from xor_job import XOR_JOB

from lenscope.cli.main import main
from lenscope.job_registry import module_label, resolve


def job_file(folder: Path, mark: str) -> Path:
    """my_jobs.py in `folder`: the XOR job and a MARK saying which file it is."""
    folder.mkdir()
    file = folder / "my_jobs.py"
    file.write_text(XOR_JOB + f'\n\nMARK = "{mark}"\n')
    return file


def test_two_job_files_with_one_stem_are_two_modules_whose_runs_share_the_stem(tmp_path: Path, capsys) -> None:
    first, second = job_file(tmp_path / "a", "a"), job_file(tmp_path / "b", "b")
    nodes = []
    for file in (first, second, first):
        args = ["run", f"{file}:Xor", "--store", str(tmp_path / "runs"), f"logging/results={tmp_path / 'results'}"]
        assert main(args) == 0
        nodes.append(capsys.readouterr().out.strip().splitlines()[-1].removeprefix("node "))
    a, b = resolve(f"{first}:Xor"), resolve(f"{second}:Xor")
    assert a is not b and a.__module__ != b.__module__
    assert (sys.modules[a.__module__].MARK, sys.modules[b.__module__].MARK) == ("a", "b")
    assert (inspect.getsourcefile(a), inspect.getsourcefile(b)) == (str(first), str(second))
    assert resolve(f"{first}:Xor") is a  # a file is imported once per process
    assert module_label(a.__module__) == module_label(b.__module__) == "my_jobs"
    assert [node.split("@")[0] for node in nodes] == ["my_jobs.Xor"] * 3  # the name does not depend on the order
    assert len({node.split("@")[1] for node in nodes}) == 3  # three runs, three lineages


def test_a_job_file_imports_its_siblings_while_it_loads_and_leaves_sys_path_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    file = job_file(folder, "sibling")
    (folder / "job_helper_sibling.py").write_text("STEPS = 3\n")
    file.write_text(file.read_text() + "\nimport job_helper_sibling\n\nSTEPS = job_helper_sibling.STEPS\n")
    before = list(sys.path)
    job = resolve(f"{file}:Xor")
    assert sys.modules[job.__module__].STEPS == 3  # the sibling was importable while the file ran
    assert sys.path == before  # was: the file's folder stayed on sys.path for the rest of the process
    assert resolve(f"{file}:Xor") is job


def test_a_job_file_that_fails_to_load_leaves_no_module_behind(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    file = job_file(folder, "broken")
    file.write_text(file.read_text() + "\nraise RuntimeError('broken job file')\n")
    before = set(sys.modules)
    with pytest.raises(RuntimeError, match="broken job file"):
        resolve(f"{file}:Xor")
    assert not {name for name in set(sys.modules) - before if "my_jobs" in name}
