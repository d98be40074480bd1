"""Reporting: views of records. Paper-style tables in every format (`tables`), figures of accuracy
against compute (`plots`), a metric's history drawn (`history_figures`), and the attention and
embedding analyses of a model with their figures (`analysis`, `analysis_figures`).

Imports: judging (statistics, frontier, references), the store and the contract; never the run
layer, the database, the site or the CLI.
"""
