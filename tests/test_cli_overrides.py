"""Config overrides go wherever `lenscope run` takes them, in every subcommand that takes config sources: before,
between or after its options (parsed in this process; nothing runs)."""

from __future__ import annotations

import argparse

import pytest

from lenscope.cli.main import build_parser, parse

OPTIONS = {  # each subcommand's options as a user writes them, in two groups (an override goes between them)
    "run": (["--base", "grokking.train@7f3a2c:20"], ["--branch", "--analysis", "fourier"]),
    "configure": ([], []),
    "sweep": (["--param", "optimization/lr=loguniform:1e-4:1e-2", "--trials", "2"],
              ["--objective", "val/accuracy:max", "--sampler", "random"]),
}


def _takes_sources() -> list[str]:
    """The subcommands whose parser has a `sources` positional (config files and overrides)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, parser in sub.choices.items()
                  if any(action.dest == "sources" for action in parser._actions))


def test_every_subcommand_with_sources_is_listed_here():
    assert _takes_sources() == sorted(OPTIONS)


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_overrides_after_the_options_are_sources(command):
    first, second = OPTIONS[command]
    args = parse([command, "grokking/train", *first, *second, "training.steps=200", "data/p=23"])
    assert args.job == "grokking/train" and args.sources == ["training.steps=200", "data/p=23"]


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_overrides_before_between_and_after_keep_their_order(command):
    first, second = OPTIONS[command]
    args = parse([command, "grokking/train", "a=1", *first, "b=2", *second, "c=3"])
    assert args.sources == ["a=1", "b=2", "c=3"]


def test_the_issue_s_sweep_command_parses():
    args = parse(["sweep", "grokking/train", "--param", "optimization/lr=loguniform:1e-4:1e-2", "--trials", "2",
                  "--objective", "val/accuracy:max", "training.steps=200"])
    assert args.sources == ["training.steps=200"] and args.trials == 2 and args.objective == "val/accuracy:max"


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_an_unknown_option_after_the_sources_is_still_refused(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse([command, "grokking/train", "training.steps=200", "--bogus"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_subcommand_without_sources_still_refuses_stray_words(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(["jobs", "training.steps=200"])
    assert exit_.value.code == 2 and "unrecognized arguments: training.steps=200" in capsys.readouterr().err
