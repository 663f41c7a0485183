"""Other tools' answer files as run dirs (formats.py: the formats and their detection; one module
per tool; common.py: what every import shares; export.py: a run written back in their formats)."""
