"""The static results site: `benchbench report` renders runs, comparisons and the model zoo as HTML.

Modules: `runs` (finding and reading runs), `cells` (table cells and numbers as the pages show
them), `figures` (inline SVG), `zoo` (every registered model), `comparison` (two runs side by
side), `build` (Jinja2 templates to files). Nothing here needs a server or the network.
"""
