"""The names of what a run directory holds: the files a run writes there, the marks that make the
directory and its checkpoints a run's, and the launcher's folder of logs (``python -m sweep``).

The one place these names are spelled: the runs (:mod:`cse.run_dir`, :mod:`cse.resume`,
:mod:`cse.pipeline`, ...) and the table scripts' driver (:mod:`sweep`) both read them from here. It
imports the standard library only, so that the driver, which does without torch and transformers,
reads the same names as the runs."""

from __future__ import annotations

# The temporary copy beside a file written atomically (cse.atomic), until it is renamed into place.
TMP_SUFFIX = ".tmp"

# The marker (PID and host, filelock.SoftFileLock's record) of the process training into a directory.
LOCK_NAME = ".cse_run.lock"
# The run's settings, written once every check has passed: its first file but the few below.
RUN_ARGS_NAME = "run_args.json"
# SG-BERT's default corpus, written into the output directory before the run takes its lock.
STSB_CORPUS_NAME = "stsb_sentences.txt"
# Written last by a run (its export's marker of completion), so it marks a finished one.
CSE_CONFIG_NAME = "cse_config.json"

# The Trainer's state and training metrics (as Trainer.save_state and save_metrics lay them out),
# written at the end of a run; a checkpoint holds its own TRAINER_STATE_NAME too.
TRAINER_STATE_NAME = "trainer_state.json"
TRAIN_RESULTS_NAME = "train_results.json"
ALL_RESULTS_NAME = "all_results.json"
# The MTEB results the table scripts' --mteb writes in a run's folder (senteval_eval.py --protocol
# mteb, scripts/lib.sh), which python -m cse.results --mteb reads.
MTEB_RESULTS_NAME = "mteb_test_results.json"

# A run's export is staged here, inside its output directory (same filesystem, so a rename moves
# it); the leading underscore keeps it out of ``--push_to_hub`` uploads (cse.model_card.PUSH_IGNORE).
STAGING_NAME = "_export" + TMP_SUFFIX
# The list of the files the run's export is moving from its staging folder into the directory
# (cse.atomic.publish), there while they are moved.
EXPORT_NAMES = "_export_names.json"
# Where a run sets aside a checkpoint a killed writer left torn (cse.resume).
INCOMPLETE_NAME = "_incomplete_checkpoints"
# The file that makes a checkpoint folder this package's, written before any other file in it.
CHECKPOINT_MARKER_NAME = "cse_checkpoint.json"
# The state of the run's parts in a checkpoint (cse.parts_state): one file, keys <part>.<key>.
PARTS_STATE_NAME = "parts_state.safetensors"

# The mark a run writes into its run_args.json (under WRITTEN_BY_KEY) and its checkpoints' marker:
# the package and the run directory's format, 1 since run_args.json says who wrote it; 0 stands for
# the runs before.
PACKAGE = "cse"
RUN_FORMAT = 1
LEGACY_FORMAT = 0
WRITTEN_BY_KEY = "written_by"
WRITTEN_BY = {"package": PACKAGE, "format": RUN_FORMAT}

# The launcher's folder (python -m sweep), written before the run starts, which a run accepts in its
# directory; the leading underscore keeps it out of --push_to_hub uploads (cse.model_card.PUSH_IGNORE).
LAUNCHER_LOGS_NAME = "_logs"
# In LAUNCHER_LOGS_NAME: the run's key (sweep.record.Run.key), written before the run is launched;
# earlier sweeps wrote it beside the run, once it had finished.
LAUNCH_ARGS_NAME = "launch_args.txt"
# In LAUNCHER_LOGS_NAME, by the kind of job: the lock each job holds while a process of it runs
# (sweep.steps), and the id of its SLURM job (sweep.slurm).
JOB_LOCK_NAMES = {"run": "train.lock", "evaluations": "evaluations.lock"}
SLURM_JOB_NAMES = {"run": "slurm_job", "evaluations": "slurm_evaluations"}


def log_name(step: str) -> str:
    """The log of the launcher's step ``step`` (``train``, or an evaluation's result), in LAUNCHER_LOGS_NAME."""
    return f"{step}.log"
