"""The sweep driver of the paper-table scripts: a table's runs as a plan (:mod:`sweep.plan`), their GPU
time (:mod:`sweep.estimate`), and the executors that run them: one after another or over this
machine's GPUs (:mod:`sweep.local`) and as SLURM jobs (:mod:`sweep.slurm`). ``python3 -m sweep
--help``; docs/reproduce.md."""
