"""Schedule synthesis: the per-rank order (backward split into I and W) that minimises makespan.

`synthesize(problem, budget=...)` (schedc/synth/search.py) starts from the best greedy or
built-in order, then bisects on the makespan with Z3 decision queries (schedc/synth/solver.py, the
only module here that builds them) between a lower bound (schedc/synth/bounds.py) and the best found.
"""
