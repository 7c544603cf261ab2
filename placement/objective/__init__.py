"""Evaluating the objective language (its grammar and parser live in common/objective, the wire contract).

evaluate.py gives each value its meaning for one cell (the reference engine); vectorized.py computes the
same values over every cell at once with numpy (the fast engine).
"""
