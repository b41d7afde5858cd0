"""Step time, throughput, memory, FLOPs and evaluation time of every method, through its real
Trainer, against the overhead targets in BENCHMARKS.md. See BENCHMARKS.md; run ``python -m bench --help``."""
