"""The static results site: `benchbench report` renders runs, comparisons and the model zoo as HTML.

Modules: `runs` (finding and reading runs), `cells` (table cells and numbers as the pages show
them), `figures` (inline SVG), `zoo` (every registered model), `comparison` (two runs side by
side), `history_page`, `run_page`, `verify_page`, `build` (Jinja2 templates to files). Nothing here
needs a server or the network.

Imports: reporting, judging, the store, meters and the contract; only the CLI imports it.
"""
