"""Where `lenscope sweep` keeps its Optuna studies beside a store (read by the sweeps and by the UI)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

OPTUNA_FILE = "optuna.db"


def optuna_url(store_url: str, root: Path) -> str:
    """The Optuna storage beside the store at `store_url`: its PostgreSQL database itself, else optuna.db in `root`."""
    url = make_url(store_url).difference_update_query(["root"])
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///{Path(root) / OPTUNA_FILE}"
    return url.render_as_string(hide_password=False)
