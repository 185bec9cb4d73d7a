"""The helpers that run `lenscope` in the test process answer as the command does and leave the process as it was."""

from __future__ import annotations

import os
import sys

from cli_runner import run_cli
from doc_shell import run_blocks


def test_run_cli_answers_like_the_command_and_puts_the_process_back(tmp_path):
    before = os.getcwd(), dict(os.environ), sys.stdout, sys.stderr
    done = run_cli("ls", "--store", str(tmp_path / "nowhere"), cwd=tmp_path, env={**os.environ, "LENSCOPE_X": "1"})
    assert done.rc == 2 and done.raw == b"" and "no lenscope store at" in done.err
    usage = run_cli("ls", "--limit", "many", cwd=tmp_path)  # argparse's SystemExit becomes the exit code
    assert usage.rc == 2 and "invalid int value: 'many'" in usage.err
    assert (os.getcwd(), dict(os.environ), sys.stdout, sys.stderr) == before and not (tmp_path / "nowhere").exists()


def test_a_docs_shell_pipes_and_checks_exit_codes_of_served_calls(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("```bash\nlenscope jobs | grep -c '^grokking/train '\n"
                   "lenscope ls --store nowhere || echo \"exit $?\"\n"
                   "export LENSCOPE_STORE=$PWD/missing\nlenscope ls 2> err.txt || cat err.txt\n```\n")
    done = run_blocks(doc, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1" and lines[1] == "exit 2"
    assert "no lenscope store at" in lines[2] and str(tmp_path / "missing") in lines[2]  # its cwd and environment
