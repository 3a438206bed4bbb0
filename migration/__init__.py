"""In-place, reversible patching of jax's Pallas TPU interpreter.

Run ``python -m migration --help`` for the commands and exit codes.
"""
