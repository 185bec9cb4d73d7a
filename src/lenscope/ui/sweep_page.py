"""The sweep pages: every study `lenscope sweep` keeps beside the store (`/sweeps`), and one study (`/sweep/NAME`):
its trials with their true states, the objective against each param, the best value so far, param importances."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from lenscope.ui.sweep_charts import best_plot, importance_bars, param_plots
from lenscope.ui.sweep_data import load_sweep, studies


def sweeps(request: Request) -> Response:
    """Every sweep of the store, with its trials counted by state."""
    ui = request.app.state.ui
    skipped: list[str] = []
    found = studies(ui.store, skipped)
    return ui.page("sweeps.html", title="Sweeps", studies=found, skipped=skipped)


def sweep(request: Request) -> Response:
    """One sweep: its trials, a scatter per param, the best-so-far curve and Optuna's param importances."""
    ui = request.app.state.ui
    found = load_sweep(ui.store, request.path_params["name"])
    return ui.page("sweep.html", title=f"sweep {found.name}", sweep=found, plots=param_plots(found),
                   best_so_far=best_plot(found), bars=importance_bars(found.importance))
