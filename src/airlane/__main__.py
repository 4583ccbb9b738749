"""``python -m airlane`` runs the command line."""

from airlane.cli import main

main()
