"""The sweep's executors on real runs: a tiny table (2 settings x 2 seeds of run_simcse.py on a tiny
BERT, each evaluated on STS-B dev) through the sequential executor, the gpus executor on the CPU with
its GPU ids given, a gpus sweep stopped midway (SIGINT) and run again, one killed outright (SIGKILL)
and run again while its runs train on, and a real single-node SLURM
(.ci/slurm) with one run's job signalled mid-run, requeued and resumed: every one prints the same
table."""

import json
import os
import signal
import subprocess
import time

import pytest

from .conftest import DATA, run_table, start_table, table_script, timed_launcher

pytestmark = pytest.mark.e2e

TINY = """
root=${OUTPUT_DIR:-$results_root/tiny}
temps=(0.05 0.1)
runs=()
for setting in 1 2; do
    for seed in 1 2; do
        out=$root/temp$setting-seed$seed
        train run_simcse.py "$out" 16 --model_name_or_path "$TINY_MODEL" --train_file "$CSE_DATA_DIR/wiki1m_head.txt" \\
            --max_steps 200 --save_strategy steps --save_steps 20 --save_total_limit 2 --eval_strategy no \\
            --load_best_model_at_end false --final_eval none --use_cpu true --report_to none --disable_tqdm true \\
            --learning_rate 1e-3 --max_seq_length 32 --temp "${temps[setting - 1]}" --seed $seed "$@"
        evaluate "$out" "$out/sts_dev_results.json" python senteval_eval.py --model_name_or_path "$out" \\
            --mode dev --task_set sts --senteval_data_dir "$DEV_DATA" --output_json "$out/sts_dev_results.json"
        runs+=("$out")
    done
done
tabulate --runs "${runs[@]}"
"""


@pytest.fixture(scope="module")
def tiny_table(tmp_path_factory, tiny_bert, dev_head):
    """The table script, and its environment with a result root of the caller's."""
    script = table_script(tmp_path_factory.mktemp("table") / "tiny.sh", TINY)
    # one thread per process: every executor computes the same floats
    env = {**os.environ, "CSE_DATA_DIR": DATA, "TINY_MODEL": tiny_bert, "DEV_DATA": dev_head, "OMP_NUM_THREADS": "1"}
    return script, lambda root: {**env, "RESULT_ROOT": str(root)}


def sweep(script, env, *args):
    """The table run to its end, given 15 minutes (its runs really train)."""
    return run_table(env, script, *args, timeout=900)


@pytest.fixture(scope="module")
def sequential(tiny_table, tmp_path_factory):
    script, env = tiny_table
    proc = sweep(script, env(tmp_path_factory.mktemp("sequential")))
    assert proc.returncode == 0, proc.stderr[-5000:]
    lines = proc.stdout.splitlines()
    assert [line.split(" |")[0] for line in lines if line.startswith("| temp")] == [
        "| temp1 (2 seeds)",
        "| temp2 (2 seeds)",
    ]
    return proc.stdout


def wait_for(path, proc=None, seconds=300):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"no {path} after {seconds} s"
        assert proc is None or proc.poll() is None, proc.communicate()[1][-5000:]
        time.sleep(0.05)


def test_gpus_executor_prints_the_sequential_table_and_a_stopped_sweep_finishes_it(tiny_table, sequential, tmp_path):
    """Stopped midway (Ctrl-C) once a run has saved a checkpoint, then the same command again: the
    sequential table, each run on one of the two GPUs, the stopped one resumed."""
    script, env = tiny_table
    root = tmp_path / "stopped"
    driver = start_table(env(root), script, "--executor", "gpus", "--gpus", "0,1")
    run = root / "tiny" / "temp1-seed1"
    wait_for(run / "checkpoint-20" / "trainer_state.json", driver)  # complete (the Trainer writes it last)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 130 and out == "", err[-5000:]
    assert "error: SIGTERM stopped the run at step" in (run / "_logs" / "train.log").read_text()
    assert not (run / "cse_config.json").exists()
    again = sweep(script, env(root), "--executor", "gpus", "--gpus", "0,1")
    assert again.returncode == 0, again.stderr[-5000:]
    assert again.stdout == sequential
    assert f"resuming from {run / 'checkpoint-'}" in (run / "_logs" / "train.log").read_text()
    logs = [(root / "tiny" / f"temp{s}-seed{d}" / "_logs" / "train.log").read_text() for s in (1, 2) for d in (1, 2)]
    # each attempt of each run on one GPU, both GPUs used
    headers = [[line for line in log.splitlines() if "CUDA_VISIBLE_DEVICES=" in line] for log in logs]
    assert all(headers) and {line.rsplit("=", 1)[1] for attempts in headers for line in attempts} == {"0)", "1)"}


def test_a_gpus_sweep_killed_outright_is_finished_by_the_same_command(tiny_table, sequential, tmp_path):
    """``kill -9`` of the gpus sweep while its first two runs train on GPUs 0 and 1: they train on to
    their end, and the same command, started at once, waits for them, starts nothing on a GPU before
    the run there has ended, trains neither again and prints the sequential table."""
    script, env = tiny_table
    root = tmp_path / "killed"
    driver = start_table(env(root), script, "--executor", "gpus", "--gpus", "0,1")
    orphans = {"0": root / "tiny" / "temp1-seed1", "1": root / "tiny" / "temp1-seed2"}
    wait_for(orphans["0"] / "checkpoint-20" / "trainer_state.json", driver)
    driver.kill()
    driver.communicate(timeout=60)
    killed = time.time()
    assert not any((run / "cse_config.json").exists() for run in orphans.values())
    again = sweep(script, env(root), "--executor", "gpus", "--gpus", "0,1")
    assert again.returncode == 0, again.stderr[-5000:]
    assert again.stdout == sequential
    for gpu, run in orphans.items():
        assert f"waiting for {run}: PID " in again.stderr
        headers = [
            line for line in (run / "_logs" / "train.log").read_text().splitlines() if line.startswith("[sweep]")
        ]
        assert len(headers) == 1 and headers[0].endswith(f"(CUDA_VISIBLE_DEVICES={gpu})")  # one attempt: the orphan's
    ended = {gpu: (run / "cse_config.json").stat().st_mtime for gpu, run in orphans.items()}
    for setting, seed in ((2, 1), (2, 2)):  # started by the second sweep, on a GPU an orphan had held
        header = (root / "tiny" / f"temp{setting}-seed{seed}" / "_logs" / "train.log").read_text().splitlines()[0]
        began = time.mktime(time.strptime(header[len("[sweep] ") :][:19], "%Y-%m-%d %H:%M:%S"))
        gpu = header.rsplit("CUDA_VISIBLE_DEVICES=", 1)[1].rstrip(")")
        assert began > killed - 1 and began >= int(ended[gpu])  # the header's time is whole seconds


def test_slurm_executor_prints_the_sequential_table_through_a_requeue(tiny_table, sequential, slurm_cluster, tmp_path):
    script, env = tiny_table
    env = {**env(tmp_path), "SLURM_CONF": slurm_cluster["SLURM_CONF"]}
    args = ["--executor", "slurm", "--slurm_partition", "debug", "--slurm_gpus_per_job", "0", "--slurm_time", "20"]
    driver = start_table(env, script, *args)
    # the run's job, mid-run: SLURM's signal before a time limit (or a preemption), sent by scancel
    run = tmp_path / "tiny" / "temp2-seed1"
    wait_for(run / "checkpoint-20" / "trainer_state.json", driver)
    job = json.loads((run / "_logs" / "slurm_job").read_text())["job_id"]
    subprocess.run(["scancel", "--signal", "USR2", job], env=env, check=True)
    out, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, err[-5000:]
    assert out == sequential
    log = (run / "_logs" / "train.log").read_text()
    assert "error: SIGTERM stopped the run at step" in log and f"resuming from {run / 'checkpoint-'}" in log
    assert log.count("[sweep] exit status") == 2  # two attempts, the first stopped (143), the second finished
    # every run has an estimate (its --max_steps): the requeued one keeps it
    assert "time left unknown" not in err
    assert subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True).stdout == ""


def test_slurm_refuses_a_partition_it_does_not_know(tiny_table, slurm_cluster, tmp_path):
    script, env = tiny_table
    proc = sweep(
        script,
        {**env(tmp_path), "SLURM_CONF": slurm_cluster["SLURM_CONF"]},
        "--executor",
        "slurm",
        "--slurm_partition",
        "gpu-a100",
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: SLURM has no partition 'gpu-a100'",
        "  hint: its partitions: debug",
    ]
    assert not (tmp_path / "tiny").exists()


def slurm_table(tmp_path, slurm_cluster, **env):
    """A table of one run (the stand-in launcher, which trains for $RUN_SECONDS) and its evaluation, and
    its environment for the single-node SLURM."""
    base, log = timed_launcher(tmp_path)
    body = (
        "train run_simcse.py $results_root/one/run 64 configs/simcse_bert_base.yaml\n"
        "evaluate $results_root/one/run $results_root/one/run/result.json touch $results_root/one/run/result.json\n"
        "show echo table"
    )
    script = table_script(tmp_path / "one.sh", body)
    return script, {**base, "SLURM_CONF": slurm_cluster["SLURM_CONF"], **env}, log


@pytest.mark.parametrize(
    "setting, said, asked",
    [
        (
            ["--slurm_gpus_per_job", "0", "--slurm_option", "constraint=nvlink"],
            "Invalid feature specification",
            "--constraint=nvlink",
        ),
        (["--slurm_gpus_per_job", "1"], "Invalid generic resource (gres) specification", "--gpus-per-node=1"),
    ],
    ids=["unknown-constraint", "gpus-on-a-cluster-without"],
)
def test_slurm_refuses_settings_sbatch_rejects_before_anything_is_written(
    slurm_cluster, tmp_path, setting, said, asked
):
    """SLURM itself refuses the jobs' options (sbatch --test-only): one line, what the jobs ask and what
    the partitions offer, exit 2, nothing submitted or written."""
    script, env, log = slurm_table(tmp_path, slurm_cluster)
    before = subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True).stdout
    proc = run_table(env, script, "--executor", "slurm", "--slurm_partition", "debug", "--slurm_time", "5", *setting)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    error, hint = proc.stderr.strip().splitlines()
    assert error.startswith("error: SLURM refuses the sweep's jobs: ") and said in error
    assert hint.startswith("  hint: the jobs ask --partition=debug --time=5 ") and asked in hint
    assert "the partitions offer: debug" in hint
    assert not os.path.exists(env["RESULT_ROOT"]) and not log.exists()
    assert subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True).stdout == before


def test_slurm_refusals_fit_what_slurm_refused_and_each_partition_of_a_list_is_checked(
    slurm_cluster, tmp_path, monkeypatch
):
    """A time SLURM refuses was hinted with the partitions' GRES and features, which have nothing to
    do with it: the hint says what the jobs ask and to correct the option SLURM names. A comma list of
    partitions, which sbatch takes, was refused whole: each of its names is checked, the unknown one
    named."""
    script, env, log = slurm_table(tmp_path, slurm_cluster)
    common = ["--executor", "slurm", "--slurm_gpus_per_job", "0"]
    proc = run_table(env, script, *common, "--slurm_partition", "debug", "--slurm_option", "time=abc")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    error, hint = proc.stderr.strip().splitlines()
    assert error == "error: SLURM refuses the sweep's jobs: Invalid --time specification"
    assert "--time=abc" in hint and "correct the option SLURM names" in hint and "GRES" not in hint
    proc = run_table(env, script, *common, "--slurm_partition", "debug,nosuch")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: SLURM has no partition 'nosuch' (of --slurm_partition debug,nosuch)",
        "  hint: its partitions: debug",
    ]
    assert not os.path.exists(env["RESULT_ROOT"]) and not log.exists()
    # a list of known partitions is taken, as sbatch takes it
    import argparse

    from sweep.slurm import settings

    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    args = argparse.Namespace(
        slurm_config=None,
        slurm_partition="debug,debug",
        slurm_time="5",
        slurm_gpus_per_job=0,
        slurm_account=None,
        slurm_option=None,
        slurm_no_wait=True,
        max_parallel=None,
    )
    monkeypatch.chdir(tmp_path)
    assert settings(args, 1).partition == "debug,debug"


def test_a_rerun_that_follows_the_slurm_jobs_says_it_follows_them(slurm_cluster, tmp_path):
    """The same command again while its jobs are in SLURM submits nothing, and says so."""
    script, env, log = slurm_table(tmp_path, slurm_cluster, RUN_SECONDS="300")
    args = ["--executor", "slurm", "--slurm_partition", "debug", "--slurm_gpus_per_job", "0", "--slurm_no_wait"]
    first = run_table(env, script, *args)
    assert first.returncode == 0, first.stderr
    run = os.path.join(env["RESULT_ROOT"], "one", "run")
    job = json.loads(open(os.path.join(run, "_logs", "slurm_job")).read())["job_id"]
    state = os.path.join(env["RESULT_ROOT"], "one", "_sweep", "one")
    table = json.loads(open(os.path.join(state, "table_job")).read())["job_id"]
    try:
        assert first.stderr.startswith("submitted to SLURM: 2 job(s) and the table's")
        again = run_table(env, script, *args)
        assert again.returncode == 0, again.stderr
        assert again.stderr.startswith(
            f"following 2 job(s) submitted before, still in SLURM, and the table's job ({table}); nothing submitted; "
        ), again.stderr
        assert json.loads(open(os.path.join(run, "_logs", "slurm_job")).read())["job_id"] == job
    finally:
        evaluations = json.loads(open(os.path.join(run, "_logs", "slurm_evaluations")).read())["job_id"]
        subprocess.run(["scancel", job, evaluations, table], env=env, check=True)


def test_a_failed_slurm_run_s_evaluation_is_counted_skipped(slurm_cluster, tmp_path):
    """The run's job fails; SLURM cancels its evaluation's job (afterok): the progress counts the
    evaluation skipped, not queued, nor failed."""
    script, env, log = slurm_table(tmp_path, slurm_cluster, FAIL_RUN="run")
    args = ["--executor", "slurm", "--slurm_partition", "debug", "--slurm_gpus_per_job", "0", "--slurm_time", "5"]
    proc = run_table(env, script, *args, timeout=300)
    assert proc.returncode == 2, proc.stderr
    progress = [line for line in proc.stderr.splitlines() if line.startswith("runs ")]
    assert progress[-1].startswith(
        "runs 0 done, 0 running, 0 queued, 1 failed; evaluations 0 done, 0 running, 0 queued, 0 failed, 1 skipped"
    ), progress
