"""``python -m turbdb.cli``: the ``turbdb`` command."""

from . import main

main()
