"""docs/architecture.md says what the code is: its picture names every top-level module, and every string naming a
module of a higher layer (an import by name lint-imports cannot see) is one it lists under "Upward reaches"."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "lenscope"
NAMED = re.compile(r"lenscope\.(\w+)([\w.]*)(:\w+)?")


def _ranks() -> dict[str, int]:
    """{top-level module: its height} from the layers contract (higher imports lower)."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = contract["contracts"][0]["layers"]
    return {name.strip(): len(layers) - i for i, layer in enumerate(layers) for name in layer.split("|")}


def upward_reaches(source: Path = SOURCE) -> set[tuple[str, str]]:
    """(file under src/lenscope, module) for each string constant in `source` naming a module of a higher layer."""
    ranks, found = _ranks(), set()
    for path in sorted(source.rglob("*.py")):
        here = path.relative_to(source)
        top = here.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named = NAMED.fullmatch(node.value)
                if named and top in ranks and ranks.get(named[1], 0) > ranks[top]:
                    found.add((here.as_posix(), f"lenscope.{named[1]}{named[2]}"))
    return found


def listed_reaches() -> set[tuple[str, str]]:
    """(file, module) of each `- `file` -> `module`, ...: reason` line of docs/architecture.md's section."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Upward reaches", 1)[1].split("\n## ", 1)[0]
    found = set()
    for item in re.findall(r"^- `([\w/.]+\.py)` -> (.+?):", section, re.MULTILINE | re.DOTALL):
        found |= {(item[0], module) for module in re.findall(r"`(lenscope\.[\w.]+)`", item[1])}
    return found


def test_every_upward_reach_by_name_is_listed_with_its_reason():
    assert upward_reaches() == listed_reaches()


def test_the_finder_sees_a_new_reach(tmp_path: Path):
    package = tmp_path / "lenscope"
    (package / "training").mkdir(parents=True)
    (package / "training" / "sneaky.py").write_text(
        'import importlib\nMODULE = "lenscope.cli.main"\nSAME = "lenscope.training.loop"\nDOWN = "lenscope.store"\n')
    assert upward_reaches(package) == {("training/sneaky.py", "lenscope.cli.main")}


def test_the_picture_names_every_top_level_module_in_its_layer():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    picture = text.split("```", 2)[1]
    named = {word.strip().removesuffix("/").removesuffix(".py") for line in picture.splitlines()
             for word in re.findall(r"(?:^|\s)(\w+(?:/|\.py))(?=\s|$)", line)}
    modules = {path.stem if path.is_file() else path.name for path in SOURCE.iterdir()
               if (path.suffix == ".py" or (path / "__init__.py").exists()) and not path.name.startswith("__")}
    assert modules - named == set(), "the picture omits these top-level modules"
    assert named - modules == set(), "the picture names modules that do not exist"
