"""The ground floor of meaning: the rules every engine derives from (docs/design.md).

`deps.py` says what an action needs and makes, `memory.py` what it holds and frees, `semantics.py`
what a send semantics or backend blocks on. Checks, fast paths, simulators, prover, synthesis and
runtime ask these modules and restate none of their rules.
"""
