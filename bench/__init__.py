"""Step time, throughput, memory, FLOPs and evaluation time of every method, through its real
Trainer (issue 9). See BENCHMARKS.md; run ``python -m bench --help``."""
