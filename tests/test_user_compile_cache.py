"""A user without a store (from_pretrained in a notebook) gets the persistent compile cache too: in
$XDG_CACHE_HOME/lenscope/compile_cache, private to the user; a second process's first call loads the program the
first compiled; `LENSCOPE_COMPILE_CACHE=off` turns it off."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from hf_models import checkpoint, torch_or_skip

from lenscope.compile_cache import ENV, user_cache_folder

_DRIVER = r'''
import json, logging, sys
import numpy as np
seen = []
handler = logging.Handler()
handler.emit = lambda record: seen.append(record.getMessage())
for name in ("jax._src.dispatch", "jax._src.compiler", "jax._src.compilation_cache"):
    logging.getLogger(name).addHandler(handler)
import jax
jax.config.update("jax_log_compiles", True)
jax.config.update("jax_explain_cache_misses", False)
import lenscope
model = lenscope.from_pretrained(sys.argv[1], tokenizer=False)
model(np.arange(4, 9)[None])
print(json.dumps({"compiled": any("Finished XLA compilation of jit(_forward)" in m for m in seen),
                  "hit": any("Persistent compilation cache hit for 'jit__forward'" in m for m in seen),
                  "cache": jax.config.jax_compilation_cache_dir}))
'''


def test_the_user_folder_unless_configured_or_off(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_folder() == tmp_path / "xdg" / "lenscope" / "compile_cache"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert user_cache_folder() == Path.home() / ".cache" / "lenscope" / "compile_cache"
    monkeypatch.setenv(ENV, str(tmp_path / "elsewhere"))
    assert user_cache_folder() == tmp_path / "elsewhere"
    monkeypatch.setenv(ENV, "off")
    assert user_cache_folder() is None


def test_a_second_process_loads_what_the_first_compiled(tmp_path) -> None:
    torch_or_skip()
    _, folder = checkpoint("gpt2")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")

    def run(extra: dict[str, str]) -> dict:
        done = subprocess.run([sys.executable, "-c", _DRIVER, str(folder)], capture_output=True, text=True,
                              env={**env, **extra}, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    cache = tmp_path / "xdg" / "lenscope" / "compile_cache"
    first = run({})
    assert first == {"compiled": True, "hit": False, "cache": str(cache)}
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and any(cache.iterdir())
    second = run({})
    assert second["hit"]  # the second process's first call loaded the first's program
    off = run({ENV: "off"})
    assert off == {"compiled": True, "hit": False, "cache": None}
