"""``python -m mbeacon.cli``: the ``mbeacon`` command without its console script."""

from mbeacon.cli import main

main()
