"""``python -m tilewise.cli``: the ``tilewise`` command."""

from tilewise.cli import main

main()
