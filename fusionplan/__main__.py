"""``python -m fusionplan``: the same command line as the ``fusionplan`` script."""

from fusionplan.app.cli import main

main()
