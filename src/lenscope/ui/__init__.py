"""`lenscope ui`: a read-only web UI over the lineage store (runs, curves, flip-books, nodes, artifacts).

The read model (`readonly`, `lineage_list`, `series`, `lineage_page`, `nodes`, `tables`, `figures`, `svg`) needs
only the store; the web layer (`app`, `pages`, `server`) adds Starlette, Jinja2 and uvicorn (the `ui`
extra). Nothing here imports JAX, Flax or the training and analysis layers.
"""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
