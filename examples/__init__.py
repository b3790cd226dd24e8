"""Example models for `schedc run --model examples.<name>:build_stages` (run from the repository root)."""
