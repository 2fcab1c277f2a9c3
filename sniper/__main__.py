"""``python -m sniper``."""

from sniper.cli import main

main()
