"""``python -m halluprobe.cli``."""

from halluprobe.cli import main

main()
