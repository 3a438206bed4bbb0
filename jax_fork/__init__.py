"""The maintainers' workbench: the fork of jax's interpreter and its tools.

Run ``python -m jax_fork --help`` for the commands; jax_fork/README.md
describes the workflow.
"""
