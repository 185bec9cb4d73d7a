"""--debug prints each compiled program's trace, lower and compile time when the command ends, longest first."""

from __future__ import annotations

import re

from lenscope.cli import main
from lenscope.cli.compile_report import SHOWN, lines


def test_debug_lists_the_training_step_with_its_phases(tiny, store_root, capsys) -> None:
    # a learning rate no other test uses: trainers of one config share one jitted step (training/shared_step.py), so
    # with the suite's own `tiny` this worker may have traced the step in an earlier test, and --debug lists no step
    fresh = [*tiny, "optimization/lr=0.00271"]
    assert main(["run", "grokking/train", *fresh, "training/steps=2", "training/analyze=false", "--store",
                 str(store_root), "--debug"]) == 0
    err = capsys.readouterr().err
    step = re.search(r"^lenscope: compiled train_step: trace [\d.]+ s, lower [\d.]+ s, compile [\d.]+ s$", err, re.M)
    assert step, err
    total = re.search(r"^lenscope: compiling took ([\d.]+) s over (\d+) programs", err, re.M)
    assert total and int(total[2]) >= 2, err
    assert main(["run", "grokking/train", *fresh, "training/steps=2", "training/analyze=false", "--store",
                 str(store_root)]) == 0
    assert "compiling took" not in capsys.readouterr().err  # only under --debug


def test_the_longest_come_first_and_the_rest_are_summed() -> None:
    report = {f"p{i}": {"trace": [0.1 * i], "compile": [1.0 * i, 0.5]} for i in range(SHOWN + 3)}
    out = lines(report)
    assert out[0] == f"lenscope: compiled p{SHOWN + 2} x2: trace {0.1 * (SHOWN + 2):.2f} s, compile {SHOWN + 2.5:.2f} s"
    assert out[SHOWN] == f"lenscope: ... and 3 more programs, {sum(1.1 * i + 0.5 for i in range(3)):.2f} s"
    assert out[-1].startswith("lenscope: compiling took ") and f"over {SHOWN + 3} programs" in out[-1]
