"""The ground floor of meaning: the rules every engine derives from (docs/design.md)."""
