"""How an error ends the command: its exit code and its one line on stderr (the rule is in docs/cli.md).

    2  the user must change something: an argument, a config value, a file or store they named, or
       their own code (an exception raised while a job, model, loss, analyze or plot of theirs ran:
       the line shows the innermost frame of their code, file:line)
    1  lenscope could not finish for a reason of its own: a bug in lenscope, or the system failing
       under it (a full disk); the line asks for --debug
    130 interrupted (Ctrl-C, SIGTERM)
"""

from __future__ import annotations

import errno
import os
import sysconfig
import traceback
from pathlib import Path

from ..errors import LenscopeError

USER, BUG = 2, 1
_LENSCOPE = Path(__file__).resolve().parents[1]  # the lenscope package folder
_LIBRARIES = tuple({str(Path(sysconfig.get_paths()[key]).resolve())
                    for key in ("stdlib", "platstdlib", "purelib", "platlib")})
_PACKAGE_FOLDERS = ("site-packages", "dist-packages")
# What a user fixes by naming another path or changing its permissions; other OSErrors (a full disk, I/O) are 1.
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EROFS,
                errno.ENAMETOOLONG, errno.ELOOP}
_JAX_NOTE = "JAX_TRACEBACK_FILTERING"  # JAX's "For simplicity, JAX has removed its internal frames..." note
_LONG = 500


def _origin(filename: str) -> str:
    """'lenscope', 'library' (Python's own modules, installed packages) or 'user' for a source file."""
    if filename.startswith("<"):
        return "user" if filename in ("<string>", "<stdin>") else "library"  # <frozen importlib._bootstrap>
    path = Path(filename).resolve()
    if path.is_relative_to(_LENSCOPE):
        return "lenscope"
    text = str(path)
    if text.startswith(_LIBRARIES) or any(part in _PACKAGE_FOLDERS for part in path.parts):
        return "library"
    return "user"


def user_frame(err: BaseException) -> tuple[str, int, str, str] | None:
    """(file, line, function, source) of the user's code that was running when `err` was raised: the innermost
    frame that is neither lenscope's, nor Python's, nor an installed library's (jnp.dot or a lenscope helper
    called from the user's analyze raised inside it); None when no user code was running."""
    if isinstance(err, SyntaxError) and err.filename and _origin(err.filename) == "user":
        return err.filename, err.lineno or 0, "<module>", (err.text or "").strip()
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if _origin(frame.filename) == "user":
            return frame.filename, frame.lineno or 0, frame.name, (frame.line or "").strip()
    return None


def exit_code(err: BaseException) -> int:
    """The exit code of a command that ended with `err` (not for KeyboardInterrupt, which is 130)."""
    if isinstance(err, LenscopeError):
        return err.exit_code
    if isinstance(err, OSError):  # the system's refusal, wherever it surfaced: a path to fix (2) or not (1)
        return USER if err.errno in _PATH_ERRNOS else BUG
    return USER if user_frame(err) is not None else BUG


def message(err: BaseException) -> str:
    """The one line printed for `err` after 'lenscope: error: ': what, where in the user's code, notes, a hint."""
    text, notes = _text(err), _notes(err)
    if isinstance(err, LenscopeError):
        return "; ".join([text, *notes])
    head = f"{type(err).__name__}: {text}"
    frame = None if isinstance(err, OSError) else user_frame(err)
    if frame is not None:
        file, line, function, source = frame
        head += f" (in your code at {_shown_path(file)}:{line}, in {function}{': ' + source if source else ''})"
        return "; ".join([head, *notes, "--debug shows the traceback"])
    if exit_code(err) == USER:
        return "; ".join([head, *notes])
    if isinstance(err, OSError):
        return "; ".join([head, *notes, "rerun with --debug for the traceback"])
    return "; ".join([head, *notes, "an error inside lenscope: rerun with --debug for the traceback, and report it"])


def _text(err: BaseException) -> str:
    """The error's message on one line (a foreign error's long message cut short)."""
    text = " ".join(str(err).split())
    if not isinstance(err, LenscopeError) and len(text) > _LONG:
        text = text[: _LONG - 3] + "..."
    return text


def _notes(err: BaseException) -> list[str]:
    """The error's notes, one line each, without JAX's note about the frames it removed."""
    return [" ".join(str(n).split()) for n in getattr(err, "__notes__", ()) if _JAX_NOTE not in str(n)]


def _shown_path(file: str) -> str:
    """A source file as the user would type it: relative to the working folder when inside it."""
    try:
        return os.path.relpath(file) if Path(file).resolve().is_relative_to(Path.cwd()) else file
    except (OSError, ValueError):
        return file

