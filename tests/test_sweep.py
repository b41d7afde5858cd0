"""The sweep driver of the table scripts (python3 -m sweep) with a stand-in launcher: the plans of the
paper tables and docs/reproduce.md's counts, runs shared between tables trained once, the gpus
executor's slots, failures, refusals of wrong settings, and a sweep stopped and started again."""

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import filelock
import pytest

from sweep import estimate
from sweep.plan import log_path, plan_tables, table_scripts
from sweep.report import counts_markdown
from sweep.steps import Step, job_holder

from .conftest import REPO, fake_tools, run_table, start_table, table_script, timed_launcher

# 2 settings x 2 seeds; each evaluation writes a score of its setting and seed
TINY = """
root=${OUTPUT_DIR:-$results_root/tiny}
runs=()
for setting in 1 2; do
    for seed in 1 2; do
        out=$root/s$setting-seed$seed
        train run_simcse.py "$out" 64 configs/simcse_bert_base.yaml --seed $seed --temp 0.0$setting "$@"
        evaluate "$out" "$out/sts_test_results.json" python -c 'import sys
from cse.atomic import write_json
write_json(sys.argv[1], {"scores": {"STS12": float(sys.argv[2]), "Avg.": float(sys.argv[2]) + 1}})' \\
            "$out/sts_test_results.json" $((setting * 10 + seed))
        runs+=("$out")
    done
done
tabulate --runs "${runs[@]}"
"""
TABLE = """STS (Spearman x 100)

| Model | STS12 | Avg. |
|---|---:|---:|
| s1 (2 seeds) | 11.50 ± 0.71 | 12.50 ± 0.71 |
| s2 (2 seeds) | 21.50 ± 0.71 | 22.50 ± 0.71 |
"""


def events(log):
    """``[(event, directory, gpus, time)]`` from the stand-in launcher's log."""
    return [(e, d, g, float(t)) for e, d, g, t in (line.split() for line in log.read_text().splitlines())]


@pytest.fixture
def tiny(tmp_path):
    env, log = timed_launcher(tmp_path)
    return table_script(tmp_path / "tiny.sh", TINY), env, log


def test_every_table_prints_its_plan_and_the_docs_counts_match_it():
    plan = plan_tables([os.path.join(REPO, s) for s in table_scripts()], plan_only=True)
    # one table a script; a run named by several tables, or twice in one, is trained once
    assert len(plan.tables) == len(table_scripts())
    assert plan.named >= plan.directories >= len({n.key for n in plan.nodes}) > len(plan.tables)
    # the docs' counts are the plan's (`python3 -m sweep all --plan` prints them)
    with open(os.path.join(REPO, "docs", "reproduce.md"), encoding="utf-8") as f:
        assert counts_markdown(plan) in f.read()
    env = {**os.environ, "SEEDS": "1 2", "RESULT_ROOT": "/nonexistent"}
    proc = run_table(env, "scripts/mixcse/table3_ablations.sh", "--plan")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("[to train] run_mixcse.py configs/mixcse_bert_") == 12
    assert "seed 1, batch 64" in out and "flags: --final_eval none --seed 1 --no_stop_gradient" in out
    assert "shared with: mixcse/table1_sts, mixcse/table2_transfer" in out
    assert "then: transfer_test_results.json: python senteval_eval.py" in out
    assert "python -m cse.results /nonexistent/mixcse/bert-base-full/seed1/sts_transfer_avg.json" in out
    assert "12 runs: 0 finished (kept), 0 interrupted (resume), 12 to train; 4 shared with another table" in out
    assert re.search(r"GPU time, training: [\d.]+ h for the runs left, .* from BENCHMARKS.md", out)


def test_the_estimate_uses_the_benchmarks_figures():
    with open(os.path.join(REPO, "BENCHMARKS.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### Every method at dc3f040") :]
    for method, (step_ms, batch, dev_suite) in estimate.MEASURED.items():
        if method.startswith("sgbert"):  # over 150 steps: "SG 63.9 ms ..., SG-OPT 51.4 ms"
            label = {"sgbert-sg": "SG", "sgbert-opt": "SG-OPT"}[method]
            assert f"{label} {step_ms} ms" in section
            row = re.search(rf"^\| {method} \| 16 x 128 \|.*$", section, re.M).group()
        else:
            row = re.search(rf"^\| {method} \| {batch} x 32 \| {step_ms} \(.*$", section, re.M).group()
        assert row.split("|")[12].strip() == f"{dev_suite:.2f}"  # the dev suite column
    assert "49.9 ms a step" in section and "| simcse | 64 x 32 | 43.7 (" in section
    # one epoch of wiki1m at batch 64 with 125 dev suites: the benchmark's own "full run" column (13 min)
    from sweep.record import Run

    run = Run("run_simcse.py", "out", 64, ("configs/simcse_bert_base.yaml",))
    assert estimate.seconds(run) == pytest.approx(15_625 * 0.0437 + 125 * 0.66)


def test_a_run_two_tables_share_is_trained_once_and_linked(tmp_path):
    env, log = timed_launcher(tmp_path)
    body = "train run_simcse.py {out} 64 configs/simcse_bert_base.yaml --seed 1\nshow echo {name}"
    first = table_script(tmp_path / "first.sh", body.format(out=tmp_path / "a" / "run", name="first"))
    second = table_script(tmp_path / "second.sh", body.format(out=tmp_path / "b" / "other-name", name="second"))
    proc = subprocess.run(
        [sys.executable, "-m", "sweep", first, second], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert [e[:2] for e in events(log)] == [
        ("start", str(tmp_path / "a" / "run")),
        ("end", str(tmp_path / "a" / "run")),
    ]
    assert os.path.islink(tmp_path / "b" / "other-name")
    assert (tmp_path / "b" / "other-name" / "cse_config.json").exists()
    assert "first" in proc.stdout and "second" in proc.stdout
    # alone, the second table finds it finished: nothing is launched
    again = run_table(env, second)
    assert again.returncode == 0 and len(events(log)) == 2 and again.stdout == "second\n"


def test_gpus_executor_one_run_per_gpu_each_seeing_its_own(tiny, tmp_path):
    script, env, log = tiny
    env = {**env, "RUN_SECONDS": "0.6"}
    proc = run_table(env, script, "--executor", "gpus", "--gpus", "3,5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == TABLE
    starts = [e for e in events(log) if e[0] == "start"]
    assert len(starts) == 4 and {gpus for _, _, gpus, _ in starts} == {"3", "5"}
    spans = {d: (t, next(t2 for e2, d2, _, t2 in events(log) if e2 == "end" and d2 == d)) for _, d, _, t in starts}
    gpu = {d: g for _, d, g, _ in starts}
    for a in spans:  # two runs on one GPU never overlap; never more at once than GPUs
        for b in spans:
            if a != b and gpu[a] == gpu[b]:
                assert spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0]
    most = max(sum(s <= t < e for s, e in spans.values()) for t, _ in spans.values())
    assert most == 2
    # the sequential executor prints the same table; NUM_GPUS=2 makes one slot of both GPUs
    assert run_table({**env, "OUTPUT_DIR": str(tmp_path / "seq")}, script).stdout == TABLE
    two = run_table(
        {**env, "OUTPUT_DIR": str(tmp_path / "pairs"), "NUM_GPUS": "2"}, script, "--executor", "gpus", "--gpus", "3,5"
    )
    assert two.returncode == 0 and {e[2] for e in events(log) if str(tmp_path / "pairs") in e[1]} == {"3,5"}


def test_a_failed_run_leaves_the_others_and_its_cells_missing(tiny):
    script, env, log = tiny
    proc = run_table({**env, "FAIL_RUN": "s2-seed1"}, script, "--executor", "gpus", "--gpus", "0,1")
    assert proc.returncode == 2
    root = os.path.join(env["RESULT_ROOT"], "tiny")
    lines = proc.stderr.strip().splitlines()
    assert lines[-3:] == [
        f"failed: {root}/s2-seed1, exit status 2; log: {root}/s2-seed1/_logs/train.log",
        f"error: {root}/s2-seed1: the run refuses",
        "  hint: what to do",
    ]
    assert "| s1 (2 seeds) | 11.50 ± 0.71 | 12.50 ± 0.71 |" in proc.stdout
    assert "| s2 (1 of 2 seeds missing) | missing | missing |" in proc.stdout
    assert len([e for e in events(log) if e[0] == "start"]) == 4
    # the same command again: the finished runs are kept, the failed one is run again
    again = run_table(env, script)
    assert again.returncode == 0 and again.stdout == TABLE
    assert [e[1] for e in events(log) if e[0] == "start"][4:] == [f"{root}/s2-seed1"]


def test_a_run_accepts_the_directory_the_sweep_prepared_for_it(tmp_path):
    """The driver writes a run's log, its key and its job's lock into its directory before launching
    it: the run must take that directory for its own, not for a directory of someone else's files."""
    from cse.run_dir import check_run_directory
    from cse.run_names import LAUNCHER_LOGS_NAME
    from sweep.plan import job_lock_path, launch_args_path

    run = str(tmp_path / "run")
    for path in (log_path(run, "train"), launch_args_path(run), job_lock_path(run, "run")):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write("run_simcse.py 64 ...\n")
        assert os.path.relpath(path, run).split(os.sep)[0] == LAUNCHER_LOGS_NAME
    check_run_directory(run)


def test_the_sweep_and_the_names_of_a_run_s_files_import_no_torch():
    """The driver, and the names of a run's files it shares with the runs (cse.run_names), import
    neither torch nor transformers: python3 -m sweep runs without them."""
    code = (
        "import sys, cse.run_names, sweep.cli, sweep.local, sweep.slurm; "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    assert subprocess.check_output([sys.executable, "-c", code], cwd=REPO, text=True) == "[]\n"


@pytest.mark.parametrize(
    "args, env, error",
    [
        (["--executor", "tpus"], {}, "error: unknown executor 'tpus'"),
        (["--executor", "gpus", "--gpus", "0,1,0"], {}, "error: --gpus 0,1,0 names GPU 0 more than once"),
        (["--executor", "gpus", "--gpus", "0,1,2"], {"NUM_GPUS": "2"}, "error: NUM_GPUS=2 does not divide the 3 GPUs"),
        (["--gpus", "0"], {}, "error: --gpus is an option of the gpus executor"),
        (["--slurm_time", "10"], {}, "error: --slurm_time is an option of the slurm executor"),
        (["--executor", "slurm"], {"PATH": "no-sbatch"}, "error: --executor slurm: sbatch is not on the PATH"),
        (["--executor", "gpus", "--gpus", "0,00"], {}, "error: --gpus 0,00 names GPU 0 more than once"),
        (["--executor", "gpus", "--gpus", "abc"], {}, "error: --gpus abc: 'abc' is not a GPU"),
        (["--executor", "gpus", "--gpus", "0,-1"], {}, "error: --gpus 0,-1: '-1' is not a GPU"),
        (["--executor", "gpus", "--gpus", "0,,1"], {}, "error: --gpus 0,,1: '' is not a GPU"),
        (["--plan", "--executor", "gpus", "--gpus", "0,0"], {}, "error: --gpus 0,0 names GPU 0 more than once"),
        (["--executor", "gpus", "--max_parallel", "nan"], {}, "error: argument --max_parallel: invalid int value"),
        (["--executor"], {}, "error: argument --executor: expected one argument"),
        (["--executor", "gpus", "--gpus", "0", "--gpus", "1"], {}, "error: --gpus is given twice"),
        (["--plan", "--executor", "sequential", "--executor=gpus"], {}, "error: --executor is given twice"),
    ],
    ids=[
        "executor",
        "gpu-twice",
        "gpus-num_gpus",
        "gpus-sequential",
        "slurm-option",
        "no-sbatch",
        "gpu-00",
        "gpu-name",
        "gpu-negative",
        "gpu-empty-item",
        "plan-gpu-twice",
        "max_parallel-nan",
        "executor-no-value",
        "gpus-twice",
        "plan-executor-twice",
    ],  # fmt: skip
)
def test_wrong_settings_end_in_one_line_before_any_work(tiny, tmp_path, args, env, error):
    script, base, log = tiny
    if env.get("PATH") == "no-sbatch":  # bash, dirname and python3 alone
        tools = tmp_path / "tools"
        tools.mkdir()
        for tool in ("bash", "dirname"):
            (tools / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
        # this interpreter with its packages (a link to it outside its environment would lose them)
        (tools / "python3").write_text(f'#!/bin/bash\nexec {sys.executable} "$@"\n')
        (tools / "python3").chmod(0o755)
        env = {"PATH": str(tools)}
    proc = run_table({**base, **env}, script, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(error) and (len(lines) == 1 or len(lines) == 2 and lines[1].startswith("  hint: "))
    assert not log.exists() and not os.path.exists(base["RESULT_ROOT"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_gpus_sweep_stopped_midway_finishes_when_run_again(tiny, signum):
    script, env, log = tiny
    env = {**env, "RUN_SECONDS": "30"}
    driver = start_table(env, script, "--executor", "gpus", "--gpus", "0,1")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not log.exists() or len(events(log)) < 2):
        time.sleep(0.1)
    driver.send_signal(signum)  # Ctrl-C, kill, or a lost SSH session
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == 128 + signum, err
    name = signal.Signals(signum).name
    assert err.strip().splitlines()[-2:] == [
        f"error: {name} stopped the sweep; the runs it stopped resume from their last checkpoint",
        "  hint: rerun the same command to finish the table",
    ]
    stopped = [d for e, d, _, _ in events(log) if e == "term"]
    assert len(stopped) == 2 and out == ""
    again = run_table({**env, "RUN_SECONDS": "0.1"}, script, "--executor", "gpus", "--gpus", "0,1")
    assert again.returncode == 0, again.stderr
    assert again.stdout == TABLE
    starts = Counter(d for e, d, _, _ in events(log) if e == "start")
    assert len(starts) == 4 and all(n == (2 if d in stopped else 1) for d, n in starts.items())


def test_a_run_another_live_process_trains_is_waited_for(tmp_path):
    env, log = fake_tools(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(["sleep", "1.5"])
    threading.Thread(target=holder.wait).start()  # reaped when it ends: no zombie holds the PID
    (out / ".cse_run.lock").write_text(f"{holder.pid}\n{os.uname().nodename}\n")
    script = table_script(tmp_path / "t.sh", f"train run_simcse.py {out} 64 configs/simcse_bert_base.yaml")
    began = time.monotonic()
    proc = run_table(env, script)
    assert proc.returncode == 0, proc.stderr
    assert f"waiting for {out}: PID {holder.pid} on this machine trains it" in proc.stderr
    assert time.monotonic() - began >= 1.5 and len(log.read_text().splitlines()) == 1


def test_a_run_waited_for_is_counted_running_is_not_said_started_and_leaves_the_time_left(tmp_path):
    """A rerun after ``kill -9`` of its driver waits for the run its orphan trains: the counts said
    ``0 running`` while it waited, ``started`` once the orphan had finished it (nothing was started),
    and, the orphan's whole run taken for an instant of this sweep's, ``about 0 s left`` with a run
    still queued. Now the run waited for is running, ends as finished without a start, and the run
    queued keeps its estimate."""
    env, log = fake_tools(tmp_path)
    held, other = tmp_path / "held", tmp_path / "other"
    held.mkdir()
    key = "run_simcse.py 64 configs/simcse_bert_base.yaml --seed 1"
    # the orphan: trains for 1.5 s, then leaves its run finished, with the key the sweep records
    orphan = subprocess.Popen(
        [
            "bash",
            "-c",
            f'sleep 1.5; mkdir -p {held}/_logs && echo "{key}" > {held}/_logs/launch_args.txt '
            f"&& echo {{}} > {held}/cse_config.json",
        ]
    )
    threading.Thread(target=orphan.wait).start()  # reaped when it ends: no zombie holds the PID
    (held / ".cse_run.lock").write_text(f"{orphan.pid}\n{os.uname().nodename}\n")
    body = (
        f"train run_simcse.py {held} 64 configs/simcse_bert_base.yaml --seed 1\n"
        f"train run_simcse.py {other} 64 configs/simcse_bert_base.yaml --seed 2"
    )
    proc = run_table(env, table_script(tmp_path / "t.sh", body))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    waiting = [line for line in lines if f"| waiting for {held}: PID {orphan.pid}" in line]
    assert waiting and waiting[0].startswith("runs 0 done, 1 running, 1 queued, 0 failed"), lines
    assert not any(f"started {held}" in line for line in lines), lines
    (finished,) = [line for line in lines if line.endswith(f"| finished {held}")]
    assert finished.startswith("runs 1 done, 0 running, 1 queued, 0 failed; about ")
    assert not re.search(r"about \d+ s left", finished), finished  # the queued run's estimate: hours
    assert any(line.endswith(f"| started {other}") for line in lines)
    assert len(log.read_text().splitlines()) == 1  # the queued run alone was launched


def test_slurm_settings_from_a_config_file_and_flags(tmp_path):
    from cse.errors import CSEUsageError
    from sweep.cli import build_parser
    from sweep.slurm import minutes, settings

    assert [minutes(t) for t in ("90", "4:00:00", "30:00", "1-00:00:00", "2-12")] == [90, 240, 30, 1440, 3600]
    with pytest.raises(CSEUsageError, match="not a SLURM time"):
        minutes("4h")
    config = tmp_path / "slurm.yaml"
    config.write_text("partition: gpu\ntime: '2:00:00'\ngpus_per_job: 2\noptions: {qos: high, cpus-per-task: 8}\n")
    parser = build_parser()
    args = parser.parse_args(["--slurm_config", str(config), "--slurm_time", "30", "--slurm_option", "qos=low"])
    got = settings(args, 1, check_cluster=False)
    assert (got.partition, got.minutes, got.gpus_per_job, got.processes) == ("gpu", 30, 2, 2)
    assert got.options == {"qos": "low", "cpus-per-task": "8"} and got.wait
    assert settings(parser.parse_args(["--slurm_gpus_per_job", "0"]), 1, check_cluster=False).processes == 1
    config.write_text("partition: gpu\nqueue: long\n")
    with pytest.raises(CSEUsageError, match=r"unknown key\(s\) queue"):
        settings(parser.parse_args(["--slurm_config", str(config)]), 1, check_cluster=False)
    with pytest.raises(CSEUsageError, match="not KEY=VALUE"):
        settings(parser.parse_args(["--slurm_option", "qos"]), 1, check_cluster=False)


@pytest.mark.parametrize("reaper", ["poll", "waitpid"])
def test_a_stopped_job_that_ignores_sigterm_is_killed_at_the_end_of_its_grace(reaper):
    """A launcher that ignores SIGTERM, with a child that ignores it too (a real process group): the
    wait ends at the deadline with the launcher killed (SIGKILL: -9) and no process of its group left,
    whether the launcher is reaped through Popen (the gpus executor) or os.waitpid (a SLURM job)."""
    from sweep.slurm import _reap
    from sweep.steps import group_alive, stop_group

    proc = subprocess.Popen(["bash", "-c", 'trap "" TERM; sleep 60 & wait; wait'], start_new_session=True)
    time.sleep(0.3)  # bash has set its trap
    os.killpg(proc.pid, signal.SIGTERM)
    reap = proc.poll if reaper == "poll" else lambda: _reap(proc.pid)
    start = time.monotonic()
    assert stop_group(proc.pid, reap, start + 0.5) == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - start < 5
    assert not group_alive(proc.pid)


@pytest.mark.e2e  # launches processes that import torch
def test_an_argument_neither_the_driver_nor_the_runs_accept_is_refused_before_any_launch(tiny):
    """A misspelled driver option reached every run, which was launched and failed: it is refused in
    one line, nothing launched or written (under --plan too: the next test)."""
    script, env, log = tiny
    proc = run_table(env, script, "--executor", "gpus", "--gpus", "0,1", "--max-parallel", "1")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: --max-parallel is neither an option of the sweep nor a flag of run_simcse.py",
        "  hint: did you mean --max_parallel? python3 -m sweep --help; python run_simcse.py --help",
    ]
    assert not log.exists() and not os.path.exists(env["RESULT_ROOT"])


@pytest.mark.e2e  # launches processes that import torch
def test_a_value_a_run_script_refuses_is_refused_before_any_launch(tiny, monkeypatch, capsys):
    """A flag's value went to every run unjudged: each was launched, failed on it and left its logs,
    lock and launch_args.txt, and the table was written. The driver parses each run's command line
    (configuration file and flags) with its run script's parser and range checks, without training:
    one error naming the script, a hint, status 2, nothing launched or written, under --plan too."""
    from cse.errors import CSEUsageError
    from sweep.cli import main

    script, env, log = tiny
    proc = run_table(env, script, "--learning_rate", "abc")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "error: run_simcse.py: argument --learning_rate/--learning-rate: invalid float value: 'abc'"
    assert len(lines) == 2 and lines[1].startswith("  hint: ")
    assert not log.exists() and not os.path.exists(env["RESULT_ROOT"])
    monkeypatch.setenv("RESULT_ROOT", env["RESULT_ROOT"])
    monkeypatch.chdir(REPO)  # main moves to the repository; restored after
    for args, error in [
        (["--learning_rate"], "argument --learning_rate/--learning-rate: expected one argument"),
        (["--executor", "gpus", "--gpus", "0,1", "--seed"], "argument --seed: expected one argument"),
        (["--seed", "--learning_rate", "1e-5"], "argument --seed: expected one argument"),
        (["--max_steps=-5"], "--max_steps must be a whole number in [1, 2147483647] or -1, got -5"),
        (["--learning_rate", "0"], "--learning_rate must be > 0, got 0"),
        (["--learning_rate", "nan"], "--learning_rate must be a finite number, got nan"),
    ]:
        with pytest.raises(CSEUsageError) as refused:
            main([script, "--plan", *args])
        assert refused.value.args[0] == f"run_simcse.py: {error}" and refused.value.hint
    assert capsys.readouterr().out == "" and not os.path.exists(env["RESULT_ROOT"])
    # a value the parser takes is planned
    assert main([script, "--plan", "--learning_rate", "1e-5", "--max_steps=5"]) == 0


def test_a_table_accepts_the_driver_options_and_the_flags_every_one_of_its_run_scripts_parses(
    tmp_path, monkeypatch, capsys
):
    """The rule, on cases no list names: a table that passes its arguments to a SimCSE and an AdCSE run
    takes what both run scripts' parsers declare (their dataclasses' fields, with the dashed spellings
    HfArgumentParser adds) and the driver's options, in either form; not a close misspelling of a
    training flag, nor a flag of one of the two run scripts only. A table that passes its arguments
    to its AdCSE runs only takes AdCSE's flags; one that passes none to its runs, no flag."""
    from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments
    from cse.errors import CSEUsageError
    from sweep.cli import main

    monkeypatch.setenv("RESULT_ROOT", str(tmp_path / "result"))
    monkeypatch.chdir(REPO)  # main moves to the repository; restored after
    body = (
        'train run_simcse.py $results_root/t/simcse 64 configs/simcse_bert_base.yaml "$@"\n'
        'train run_adcse.py $results_root/t/adcse 64 configs/adcse_bert_base.yaml "$@"'
    )
    script = table_script(tmp_path / "two.sh", body)
    accepted = [
        "--executor=slurm",
        "--slurm_time=10",
        "--learning-rate",
        "3e-5",
        "--temp",
        "-0.1",
        "--seed=2",
        "--plan",
    ]
    assert main([script, *accepted]) == 0
    out = capsys.readouterr().out
    assert "(executor: slurm)" in out and out.count("flags: --learning-rate 3e-5 --temp -0.1 --seed=2") == 2
    for args, error, hint in [
        (["--learning_rat", "1e-4"], "--learning_rat is neither an option of the sweep nor a flag of run_adcse.py, "
         "run_simcse.py", "did you mean --learning_rate?"),
        (["--num_adversaries", "4"], "--num_adversaries is a flag of run_adcse.py but not of run_simcse.py,", None),
        (["--executor", "gpus", "--gpus", "0", "--max_paralel=2"], "--max_paralel is neither", "--max_parallel"),
        (["--executer", "gpus"], "--executer is neither", "did you mean --executor?"),
    ]:  # fmt: skip
        with pytest.raises(CSEUsageError) as refused:
            main([script, "--plan", *args])
        assert str(refused.value).startswith(error)
        assert hint is None or hint in refused.value.hint
    assert capsys.readouterr().out == "" and not os.path.exists(tmp_path / "result")
    # AdCSE's Fig. 4(a) passes its arguments to its AdCSE runs only, not to the SimCSE runs beside them
    assert (
        main([os.path.join(REPO, "scripts", "adcse", "fig4a_batch_size.sh"), "--plan", "--adversary_momentum", "0"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("--adversary_momentum 0") == 4 and out.count("[to train] run_simcse.py") == 4
    # a table that passes no argument to its runs would drop them without a word
    alone = table_script(
        tmp_path / "alone.sh", "train run_simcse.py $results_root/t/simcse 64 configs/simcse_bert_base.yaml"
    )
    with pytest.raises(CSEUsageError, match="the tables pass no argument to their runs"):
        main([alone, "--plan", "--seed", "2"])
    # read from the parsers: every field of the dataclasses, the method's own flags only in its script's
    from sweep.flags import script_flags

    simcse, adcse = script_flags("run_simcse.py"), script_flags("run_adcse.py")
    for dtype in (ModelArguments, DataArguments, CSETrainingArguments):
        assert {f"--{f.name}" for f in dataclasses.fields(dtype)} <= simcse & adcse
    assert "--num_adversaries" in adcse - simcse and "--learning-rate" in simcse
    # the composition's: --parts and each part's flags, also under its part's name
    composed = script_flags("run_cse.py")
    assert {"--parts", "--mix_lambda", "--mixcse_mix_lambda", "--mixcse_variant", "--seed"} <= composed
    assert "--learning_rat" not in composed


def test_plan_into_a_pipe_its_reader_closed_ends_quietly():
    """``--plan | head``: the reader gone, the driver ends as a command of a pipe does (SIGPIPE's
    status), without a traceback."""
    env = {**os.environ, "RESULT_ROOT": "/nonexistent"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep", "all", "--plan"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # before the plan is written: its first write finds no reader
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE
    assert err == ""


def on_a_terminal(env, script, *args):
    """``script`` run with its stderr on a pseudo-terminal of 400 columns (a progress bar): its exit
    status and what the terminal received."""
    import fcntl
    import pty
    import struct
    import termios

    main_fd, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))
    proc = subprocess.Popen(
        ["bash", script, *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=terminal, stdin=subprocess.DEVNULL
    )
    os.close(terminal)
    received = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the terminal's last writer has gone
            break
        if not chunk:
            break
        received += chunk
    os.close(main_fd)
    return proc.wait(timeout=60), received.decode(errors="replace")


def failed_last_on_a_terminal(tiny):
    """The tiny table on a terminal, its last run failing: the lines of its progress bar, and the
    directory of the runs."""
    script, env, log = tiny
    status, screen = on_a_terminal({**env, "FAIL_RUN": "s2-seed2", "RUN_SECONDS": "0.5"}, script)
    assert status == 2, screen
    return [part for part in re.split(r"[\r\n]", screen) if re.search(r"\d+/8 \[", part)], env["RESULT_ROOT"]


def test_on_a_terminal_the_bar_ends_full_when_a_run_failed(tiny):
    """The failed run's evaluation, which never runs, is counted: 8 of 8 jobs, 100 %."""
    bars, _ = failed_last_on_a_terminal(tiny)
    assert "100%" in bars[-1] and " 8/8 [" in bars[-1], bars[-1]


def test_on_a_terminal_the_bar_shows_no_evaluation_queued_after_a_failed_run(tiny):
    bars, _ = failed_last_on_a_terminal(tiny)
    assert "evaluations 3 done, 0 running, 0 queued, 0 failed, 1 skipped" in bars[-1], bars[-1]


def test_on_a_terminal_the_bar_names_the_running_runs(tiny):
    bars, root = failed_last_on_a_terminal(tiny)
    for setting, seed in ((1, 1), (1, 2), (2, 1), (2, 2)):
        assert any(f"running: {root}/tiny/s{setting}-seed{seed}" in bar for bar in bars), bars


def test_the_time_left_of_a_requeued_run_is_its_estimate_less_what_it_ran(monkeypatch):
    """A SLURM job requeued (running, then queued, then running again) resumes its run from its
    checkpoint: the time left keeps the run's estimate, less the time it has run (hand computed)."""
    import io
    import types

    from sweep import progress as progress_module

    clock = [0.0]
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    progress = progress_module.Progress(2, 0, 1, io.StringIO())
    progress.expect("a", 600.0)
    progress.expect("b", 600.0)
    progress.move("runs", "a", "queued", "running", "")
    clock[0] = 240.0
    progress.move("runs", "a", "running", "queued", "requeued")
    clock[0] = 300.0
    progress.move("runs", "a", "queued", "running", "")
    clock[0] = 360.0  # a: 600 - 240 - 60 = 300 s left; b: 600 s
    assert progress.time_left() == "about 15 min left"
    clock[0] = 660.0
    progress.move("runs", "a", "running", "done", "")  # 240 + 360 s for a run estimated at 600 s: rate 1
    progress.move("runs", "b", "queued", "running", "")
    clock[0] = 720.0
    assert progress.time_left() == "about 9 min left"


@pytest.mark.e2e  # launches processes that import torch
def test_the_table_is_written_with_its_figure_beside_it(tiny):
    """The sequential executor prints the table and writes it, and its figure, under the runs' folder:
    the figure's bars are the table's means, its error bars the seeds' spread."""
    from cse import plots

    script, env, _ = tiny
    proc = run_table(env, script)
    assert proc.returncode == 0, proc.stderr
    state = os.path.join(env["RESULT_ROOT"], "tiny", "_sweep", "tiny")
    with open(os.path.join(state, "table.txt"), encoding="utf-8") as f:
        assert f.read() == proc.stdout == TABLE
    with open(os.path.join(state, "table.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert f"the table and its figure: {state}/table.txt, {state}/table.png" in proc.stderr
    fig = plots.table_figure(plots.read_tables(TABLE))
    bars = {p.get_gid(): p.get_height() for p in fig.axes[0].patches}
    # seeds 11, 12 and 21, 22 (TINY's scores), Avg. one more
    assert bars == {
        "s1 (2 seeds)|STS12|ours": 11.5,
        "s1 (2 seeds)|Avg.|ours": 12.5,
        "s2 (2 seeds)|STS12|ours": 21.5,
        "s2 (2 seeds)|Avg.|ours": 22.5,
    }


def test_mteb_adds_an_mteb_evaluation_of_each_run_and_an_mteb_table(tiny):
    script, env, _ = tiny
    proc = run_table(env, script, "--mteb", "--plan")
    assert proc.returncode == 0, proc.stderr
    root = os.path.join(env["RESULT_ROOT"], "tiny")
    for run in ("s1-seed1", "s1-seed2", "s2-seed1", "s2-seed2"):
        out = f"{root}/{run}"
        assert (
            f"then: mteb_test_results.json: python senteval_eval.py --model_name_or_path {out} --protocol mteb "
            f"--output_json {out}/mteb_test_results.json"
        ) in proc.stdout
    assert "--missing mark --mteb" in proc.stdout
    plain = run_table(env, script, "--plan")
    assert "--protocol mteb" not in plain.stdout and "--mteb" not in plain.stdout


# --- a sweep killed outright, a run or an evaluation killed: real SIGKILLs of real processes -------

# TINY with evaluations that take their time (the stand-in timed-eval)
TIMED = re.sub(
    r"python -c '.*?\$\(\(setting \* 10 \+ seed\)\)",
    'timed-eval "$out" "$out/sts_test_results.json" $((setting * 10 + seed))',
    TINY,
    flags=re.S,
)
assert "timed-eval" in TIMED


def processes(log):
    """Each process the stand-ins logged: ``(kind, directory, gpus, start, end)``, end None while it runs."""
    going, ended = {}, []  # (kind, directory) -> [(gpus, start)], the first started first ended
    for event, directory, gpus, t in events(log):
        kind = "evaluation" if event.startswith("eval") else "run"
        if event in ("start", "evalstart"):
            going.setdefault((kind, directory), []).append((gpus, t))
        elif event in ("end", "evalend", "term"):
            gpus, began = going[(kind, directory)].pop(0)
            ended.append((kind, directory, gpus, began, t))
    return ended + [(kind, d, gpus, began, None) for (kind, d), left in going.items() for gpus, began in left]


def assert_one_process_per_gpu(log):
    """The rule the gpus executor keeps, whoever started the processes: two processes that share a GPU
    never run at once."""
    procs = processes(log)
    for a in procs:
        for b in procs:
            if a is not b and set(a[2].split(",")) & set(b[2].split(",")):
                assert a[4] is not None and b[4] is not None, (a, b)
                assert a[4] <= b[3] or b[4] <= a[3], (a, b)


def wait_for_event(log, event, directory, driver=None, seconds=60):
    deadline = time.monotonic() + seconds
    while not (log.exists() and any(e == event and d.endswith(directory) for e, d, _, _ in events(log))):
        assert time.monotonic() < deadline, f"no {event} of {directory} after {seconds} s"
        assert driver is None or driver.poll() is None, driver.communicate()[1][-5000:]
        time.sleep(0.05)


def step_pid(lock):
    """The PID the job lock file ``lock`` names: its step's process (written just after it started)."""
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError):
            with open(lock, encoding="utf-8") as f:
                return int(json.load(f)["pid"])
        assert time.monotonic() < deadline, f"{lock} names no process"
        time.sleep(0.05)


def kill_driver(driver):
    """``kill -9`` of the sweep's process (the table script execs it): nothing of it runs after."""
    driver.kill()
    driver.communicate(timeout=30)
    assert driver.returncode == -signal.SIGKILL


@pytest.mark.e2e
def test_a_jobs_lock_is_held_by_its_process_whatever_becomes_of_the_sweep(tmp_path):
    """A step's process holds its job's lock, naming itself and its GPUs, after the process that
    started it is killed outright, and the lock is free once that process has ended, however."""
    lock = str(tmp_path / "run" / "_logs" / "evaluations.lock")
    code = (
        "import sys, time\nfrom sweep.steps import Step\n"
        f"step = Step('x', {str(tmp_path / 'run')!r}, {str(tmp_path / 'run' / '_logs' / 'x.log')!r}, "
        f"['sleep', '60'], {lock!r}, output='none')\n"
        "print(step.start({}, '3,4').pid, flush=True)\ntime.sleep(60)\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    pid = int(driver.stdout.readline())
    holder = job_holder(lock)
    assert (holder.pid, holder.host, holder.gpus) == (str(pid), os.uname().nodename, "3,4")
    driver.kill()
    driver.wait()
    holder = job_holder(lock)
    assert holder is not None and holder.pid == str(pid)
    assert holder.holds("4") and holder.holds("4,5") and not holder.holds("5") and holder.holds(None)
    # a second start of the job is refused while its process lives
    with pytest.raises(filelock.Timeout):
        Step("x", str(tmp_path / "run"), str(tmp_path / "x.log"), ["true"], lock, output="none").start({}, "5")
    os.kill(pid, signal.SIGKILL)  # the process ends, however: the system releases its lock
    deadline = time.monotonic() + 10
    while job_holder(lock) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.e2e
def test_a_sweep_killed_outright_leaves_its_jobs_going_and_the_rerun_waits_for_them_and_their_gpus(tmp_path):
    """``kill -9`` of the driver while s1-seed2 trains on one GPU and s1-seed1's evaluation runs on the
    other: the same command again waits for both, hands their GPUs to nothing else until they end,
    starts neither again, and knows s1-seed2, finished meanwhile, for its run."""
    env, log = timed_launcher(tmp_path)
    env = {**env, "SLOW_RUN": "s1-seed2", "SLOW_EVAL": "s1-seed1", "SLOW_SECONDS": "6"}
    script = table_script(tmp_path / "timed.sh", TIMED)
    gpus = ["--executor", "gpus", "--gpus", "0,1"]
    driver = start_table(env, script, *gpus)
    wait_for_event(log, "evalstart", "s1-seed1", driver)
    kill_driver(driver)
    going = [(kind, os.path.basename(d)) for kind, d, _, _, end in processes(log) if end is None]
    assert sorted(going) == [("evaluation", "s1-seed1"), ("run", "s1-seed2")]
    killed = time.time()
    again = run_table(env, script, *gpus, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout == TABLE
    procs = processes(log)
    assert Counter((kind, os.path.basename(d)) for kind, d, *_ in procs) == {
        (kind, f"s{s}-seed{d}"): 1 for kind in ("run", "evaluation") for s in (1, 2) for d in (1, 2)
    }
    assert all(end is not None for *_, end in procs)  # the orphans finished
    orphans_end = min(end for kind, d, _, _, end in procs if os.path.basename(d) in ("s1-seed1", "s1-seed2"))
    later = [began for _, _, _, began, _ in procs if began > killed]
    assert later and min(later) >= orphans_end  # both GPUs were held: nothing started before one was free
    assert_one_process_per_gpu(log)
    root = os.path.join(env["RESULT_ROOT"], "tiny")
    assert f"waiting for {root}/s1-seed2: PID " in again.stderr
    assert f"waiting for evaluations {root}/s1-seed1: PID " in again.stderr
    third = run_table(env, script, *gpus)
    assert third.returncode == 0 and third.stdout == TABLE and len(processes(log)) == len(procs)


@pytest.mark.e2e
def test_a_run_that_finished_after_its_sweep_was_killed_is_known_for_its_run(tmp_path):
    """``kill -9`` of the driver while s2-seed2 trains; the run finishes on its own, watched by no sweep:
    the same command keeps it (its key was on disk before it trained) and prints the table, and so does
    every later one."""
    env, log = timed_launcher(tmp_path)
    env = {**env, "SLOW_RUN": "s2-seed2", "SLOW_SECONDS": "2"}
    script = table_script(tmp_path / "timed.sh", TIMED)
    driver = start_table(env, script)
    wait_for_event(log, "start", "s2-seed2", driver)
    kill_driver(driver)
    wait_for_event(log, "end", "s2-seed2")
    run = os.path.join(env["RESULT_ROOT"], "tiny", "s2-seed2")
    deadline = time.monotonic() + 10
    while subprocess.run(["fuser", "-s", os.path.join(run, "_logs", "train.lock")]).returncode == 0:
        assert time.monotonic() < deadline  # the orphan's processes have ended
        time.sleep(0.05)
    for _ in range(2):
        again = run_table(env, script)
        assert again.returncode == 0, again.stderr
        assert again.stdout == TABLE
        assert Counter(d for e, d, _, _ in events(log) if e == "start")[run] == 1


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["run", "evaluation"])
def test_a_run_or_an_evaluation_killed_fails_alone_and_the_same_command_does_it_again(tmp_path, kind):
    """``kill -9`` of s1-seed2's training, or of its evaluation: the sweep goes on with the others, names
    it failed (exit status 137) with its cells missing; the same command does it again, and only it."""
    env, log = timed_launcher(tmp_path)
    env = {**env, "SLOW_RUN" if kind == "run" else "SLOW_EVAL": "s1-seed2", "SLOW_SECONDS": "60"}
    script = table_script(tmp_path / "timed.sh", TIMED)
    gpus = ["--executor", "gpus", "--gpus", "0,1"]
    driver = start_table(env, script, *gpus)
    wait_for_event(log, "start" if kind == "run" else "evalstart", "s1-seed2", driver)
    root = os.path.join(env["RESULT_ROOT"], "tiny")
    lock = "train.lock" if kind == "run" else "evaluations.lock"
    pid = step_pid(os.path.join(root, "s1-seed2", "_logs", lock))
    os.kill(pid, signal.SIGKILL)
    try:
        out, err = driver.communicate(timeout=60)
    finally:
        # The stand-in's sleep, left in its process group; the group may already be empty.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    assert driver.returncode == 137, err
    what, log_name = (
        (f"{root}/s1-seed2", "train") if kind == "run" else (f"sts_test_results of {root}/s1-seed2", "sts_test_results")
    )
    assert f"failed: {what}, exit status 137; log: {root}/s1-seed2/_logs/{log_name}.log" in err
    assert "| s1 (1 of 2 seeds missing) |" in out and "| s2 (2 seeds) | 21.50 ± 0.71 | 22.50 ± 0.71 |" in out
    before = Counter((e, d) for e, d, _, _ in events(log))
    again = run_table({**env, "SLOW_SECONDS": "0.1"}, script, *gpus)
    assert again.returncode == 0, again.stderr
    assert again.stdout == TABLE
    new = Counter((e, d) for e, d, _, _ in events(log)) - before
    expected = {"start", "end", "evalstart", "evalend"} if kind == "run" else {"evalstart", "evalend"}
    assert new == {(e, f"{root}/s1-seed2"): 1 for e in expected}


# --- SLURM: a real time limit, a plain scancel and a job killed as when its node dies -------------

SLURM_TABLE = TIMED.replace("for setting in 1 2", "for setting in 1")
SLURM_PRINTED = TABLE.replace("| s2 (2 seeds) | 21.50 ± 0.71 | 22.50 ± 0.71 |\n", "")
SLURM_ARGS = ["--executor", "slurm", "--slurm_partition", "debug", "--slurm_gpus_per_job", "0", "--slurm_time", "20"]


def slurm_sweep(tmp_path, slurm_cluster, seconds=300):
    """The table of two stand-in runs for SLURM, s1-seed2 slow (``seconds``) until SIGTERM stops it, and
    the environment; the sweep started, once s1-seed2 runs: the driver, the run's directory, its job."""
    env, log = timed_launcher(tmp_path)
    env = {**env, "SLURM_CONF": slurm_cluster["SLURM_CONF"], "SLOW_RUN": "s1-seed2", "SLOW_SECONDS": str(seconds)}
    script = table_script(tmp_path / "slurm.sh", SLURM_TABLE)
    driver = start_table(env, script, *SLURM_ARGS)
    wait_for_event(log, "start", "s1-seed2", driver, seconds=300)
    run = os.path.join(env["RESULT_ROOT"], "tiny", "s1-seed2")
    with open(os.path.join(run, "_logs", "slurm_job"), encoding="utf-8") as f:
        job = json.load(f)["job_id"]
    return script, env, log, driver, run, job


def squeue_empty(env):
    return subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True).stdout == ""


@pytest.mark.e2e
def test_a_slurm_job_at_its_time_limit_is_requeued_and_its_run_resumes(tmp_path, slurm_cluster):
    """A real time limit: SLURM's signal before it (submitit's USR2, 90 s ahead) stops the run at its
    step, the job requeues itself and the run resumes; the sweep prints the table."""
    script, env, log, driver, run, job = slurm_sweep(tmp_path, slurm_cluster)
    # its time limit brought down to a minute: SLURM's signal 90 s before the limit is due at once
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], env=env, check=True)
    # once signalled, the job gets its limit back, as a requeued job on a cluster starts with its
    # whole limit again (at a minute it would be signalled again as soon as it started)
    wait_for_event(log, "term", "s1-seed2", driver, seconds=120)
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=20"], env=env, check=True)
    out, err = driver.communicate(timeout=600)
    assert driver.returncode == 0, err
    assert out == SLURM_PRINTED
    with open(os.path.join(run, "_logs", "train.log"), encoding="utf-8") as f:
        statuses = [line for line in f.read().splitlines() if line.startswith("[sweep] exit status")]
    assert statuses == ["[sweep] exit status 143", "[sweep] exit status 0"]  # stopped at its step, then resumed
    assert [e for e, d, _, _ in events(log) if d == run and "eval" not in e] == ["start", "term", "start", "end"]
    assert squeue_empty(env)


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["scancel", "killed"])
def test_a_slurm_job_cancelled_or_killed_fails_alone_and_the_same_command_submits_it_again(
    tmp_path, slurm_cluster, how
):
    """A plain ``scancel`` of the run's job (SIGTERM to its processes), or SIGKILL to every process of it
    at once (its node dies): the other run and the table go on, the run is named failed with its cells
    missing, and the same command submits it again."""
    script, env, log, driver, run, job = slurm_sweep(tmp_path, slurm_cluster)
    if how == "scancel":
        subprocess.run(["scancel", job], env=env, check=True)
    else:  # the job's step killed as when its node dies: the run and the job's own process, SIGKILL
        group = step_pid(os.path.join(run, "_logs", "train.lock"))  # the run's launcher, its group's leader
        step = []  # it and its ancestors up to SLURM's step daemon: the job's Python
        pid = group
        while not open(f"/proc/{pid}/comm").read().startswith("slurmstepd"):
            step.append(pid)
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        assert len(step) >= 2
        for signum in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: none goes on while the others die
            os.killpg(group, signum)
            for pid in step:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
    out, err = driver.communicate(timeout=600)
    lines = err.strip().splitlines()
    if how == "scancel":  # SLURM's SIGTERM: the run stopped at its step, and says so
        assert driver.returncode == 143, err
        assert lines[-3:] == [
            f"failed: {run}, exit status 143; log: {run}/_logs/train.log",
            "error: SIGTERM stopped the run at step 1; no checkpoint saved yet",
            "  hint: rerun the same command to resume",
        ]
    else:
        assert driver.returncode == 1, err
        assert lines[-2:] == [
            f"failed: {run} (training), exit status 1; log: {run}/_logs/train.log",
            "its job ended while it ran, recording nothing (killed outright, or its node failed)",
        ]
    assert "| s1 (1 of 2 seeds missing) |" in out
    deadline = time.monotonic() + 60
    while not squeue_empty(env):  # the killed job's evaluations, cancelled
        assert time.monotonic() < deadline
        time.sleep(1)
    again = run_table({**env, "SLOW_SECONDS": "0.1"}, script, *SLURM_ARGS, timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.stdout == SLURM_PRINTED
    stopped = ["term"] if how == "scancel" else []  # SIGTERM, else SIGKILL: nothing of it runs on
    assert [e for e, d, _, _ in events(log) if d == run and "eval" not in e] == ["start", *stopped, "start", "end"]
    assert squeue_empty(env)


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_slurm_driver_stopped_leaves_the_jobs_and_the_same_command_follows_them(tmp_path, slurm_cluster, signum):
    """Ctrl-C or ``kill -9`` of the slurm executor's driver while a run's job runs: the jobs go on, and
    the same command follows them to the table without submitting any again."""
    script, env, log, driver, run, job = slurm_sweep(tmp_path, slurm_cluster, seconds=15)
    driver.send_signal(signum)
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == (130 if signum == signal.SIGINT else -signal.SIGKILL), err
    if signum == signal.SIGINT:
        assert err.strip().splitlines()[-2:] == [
            "error: SIGINT stopped the driver; the jobs go on in SLURM",
            "  hint: rerun the same command to follow them",
        ]
    assert not squeue_empty(env)
    again = run_table(env, script, *SLURM_ARGS, timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.stdout == SLURM_PRINTED
    with open(os.path.join(run, "_logs", "slurm_job"), encoding="utf-8") as f:
        assert json.load(f)["job_id"] == job  # followed, not submitted again
    assert [e for e, d, _, _ in events(log) if d == run and "eval" not in e] == ["start", "end"]
    assert squeue_empty(env)
