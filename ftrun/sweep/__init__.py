"""A sweep's work below its command (``ftrun.commands.sweep`` parses, calls and renders).
Torch-free: each cell trains in a child process.

- ``cells``: the grid's cells classified (invalid, unavailable, to run) before any trains.
- ``runner``: each cell to run is a real ``ftrun train --config DIR/NAME/cells/CELL.toml --json``
  in a child process, writing its run dir ``DIR/NAME/CELL``; ``Runner.stop()`` stops them all;
  ``--warm-start``: the next cell's training starts parked while a cell trains (``ftrun.worker.park``).
- ``evaluate``: a trained cell's verdict and figures: the ``inspect-trace`` analysis
  (``ftrun.check.analyze``, with the replica-agreement check on the event logs) and ``compare``'s
  per-run metrics (``ftrun.check.metrics.run_metrics``).
- ``resume``: ``--resume`` re-checks a cell that holds a ``CELL/sweep-cell.json`` from its run dir.
- ``record``: the sweep's result (``sweep.json``'s content): cells, counts, machine, versions.
"""
