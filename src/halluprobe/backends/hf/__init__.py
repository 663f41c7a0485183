"""The hf backend: a model core (core.py) plus one engine per answer() call (engines.py, decode_*.py)."""
