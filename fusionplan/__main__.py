"""``python -m fusionplan``: the same command line as the ``fusionplan`` script."""

from fusionplan.cli import main

main()
