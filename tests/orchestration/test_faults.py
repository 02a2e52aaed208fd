"""Faults an operator meets in the processes, tried for real (issues 28, 29): the `yunque run`
that started a daemon killed with SIGKILL or Ctrl-C, its daemon killed under it, two
commands at once, a dead daemon's heartbeat, the UI beside the command, a shard that
leaves the corpus mid-run. Real subprocesses, a real sqlite instance, the real daemon
and runs. Outages of the services and the disk are tests/yunque/test_outages.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.factory import add_shard, write_two_shards
from tests.support.fault_runs import (
    SELECT,
    daemon_processes,
    fault_mid_run,
    instance_of,
    open_instance,
    ours,
    outputs,
    rerun,
    run_worker,
    start_run,
    wait,
)


def test_a_killed_command_takes_its_daemon_and_runs_with_it(tmp_path, monkeypatch):
    """kill -9 of `yunque run` mid-run: the daemon it started notices, cancels the
    backfill, stops its runs and itself; nothing of ours is left running, and the same
    command then finishes the work."""
    corpus, home = tmp_path / "corpus", tmp_path / "home"
    write_two_shards(corpus)
    add_shard(corpus, "grande", seed=3, docs=1500)  # seconds of work: the kill lands mid-run
    dagster_home = home / "dagster"
    cli = start_run(home, corpus)
    try:
        wait(lambda: run_worker(dagster_home), 180, "a run worker started")
        os.killpg(cli.pid, signal.SIGKILL)
        cli.wait(timeout=30)
        # the daemon's watch (1 s), its SIGINT to its runs, SIGKILL after 30 s at most
        wait(lambda: not ours(dagster_home) or None, 90, f"our processes gone: {ours(dagster_home)}")
    finally:
        for p in ours(dagster_home):
            p.kill()
    instance = open_instance(dagster_home, monkeypatch)
    backfills = instance.get_backfills()
    assert [b.status.value for b in backfills] == ["CANCELED"]
    assert "the command that started this daemon" in (dagster_home / "daemon.log").read_text()

    # its heartbeat is fresh, but its record says it is gone: the command starts a daemon
    # at once instead of waiting on a dead one until the heartbeat is 90 s old
    done = rerun(home, corpus)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting a Dagster daemon for this run" in done.stdout, done.stdout
    assert "0 failed" in done.stdout, done.stdout
    wait(lambda: not ours(dagster_home) or None, 30,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(dagster_home)]}")
    assert rerun(tmp_path / "clean", corpus).returncode == 0
    assert outputs(home) == outputs(tmp_path / "clean")


def test_a_daemon_killed_under_the_command_is_replaced(tmp_path):
    """kill -9 of the daemon `yunque run` started: the command says so in one line,
    starts another, and the backfill completes; nothing is left running."""
    corpus, home = tmp_path / "corpus", tmp_path / "home"
    write_two_shards(corpus)
    dagster_home = home / "dagster"
    cli = start_run(home, corpus)
    try:
        first = wait(lambda: daemon_processes(dagster_home), 180, "the daemon started")[0]
        wait(lambda: run_worker(dagster_home), 180, "a run worker started")
        first.kill()
        out, _ = cli.communicate(timeout=600)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert "the Dagster daemon exited (code -9); starting another" in out, out
    assert cli.returncode in (0, 1), out  # a run the dead daemon's code server held may have failed
    wait(lambda: not ours(dagster_home) or None, 60, "our processes gone")
    if cli.returncode == 1:  # then the same command finishes it
        again = rerun(home, corpus)
        assert again.returncode == 0, again.stdout + again.stderr
    assert rerun(tmp_path / "clean", corpus).returncode == 0
    assert outputs(home) == outputs(tmp_path / "clean")


def test_two_commands_at_once_on_a_new_home_both_finish(tmp_path):
    """Two `yunque run` started together on a home that does not exist yet: they take turns
    creating the instance, registering the shards and starting a daemon (one daemon serves
    both; two would each fail the other's runs), both end with status 0, nothing is left
    running, and the outputs are those of one clean run."""
    corpus, home, clean = tmp_path / "corpus", tmp_path / "home", tmp_path / "clean"
    write_two_shards(corpus)
    dagster_home = home / "dagster"
    both = [start_run(home, corpus) for _ in range(2)]
    try:
        outs = [cli.communicate(timeout=600)[0] for cli in both]
    finally:
        for cli in both:
            if cli.poll() is None:
                os.killpg(cli.pid, signal.SIGKILL)
    for cli, out in zip(both, outs, strict=True):
        assert cli.returncode == 0, out
        assert "0 failed" in out, out
    assert sum("starting a Dagster daemon" in out for out in outs) == 1, outs
    wait(lambda: not ours(dagster_home) or None, 60,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(dagster_home)]}")
    assert rerun(clean, corpus).returncode == 0
    assert outputs(home) == outputs(clean)


def _serving_daemon(tmp_path: Path, monkeypatch, backfills_only: bool = True):
    """(instance, its DAGSTER_HOME, the process) of a daemon of ours on a new home, serving."""
    from orchestration import daemon
    from yunque import env

    # set first, so that teardown restores what they were before use_home changed them
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    dagster_home = env.use_home(tmp_path / "home") / "dagster"
    instance = open_instance(dagster_home, monkeypatch)
    log = dagster_home / "daemon.log"
    proc = daemon.start(log, backfills_only=backfills_only)
    try:
        daemon.wait_serving(instance, proc, log)
    except RuntimeError:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return instance, dagster_home, proc


def test_a_dead_daemons_heartbeat_does_not_count(tmp_path, monkeypatch):
    """A daemon of ours that died leaves a fresh heartbeat; `serving` sees its process is
    gone, forgets the heartbeat and says no at once, instead of for 90 s."""
    from orchestration import daemon

    instance, dagster_home, proc = _serving_daemon(tmp_path, monkeypatch)
    try:
        assert daemon.serving(instance)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        beat = instance.get_daemon_heartbeats().get("BACKFILL")
        assert beat is not None and time.time() - beat.timestamp < daemon.FRESH_S  # it would have fooled us
        assert not daemon.serving(instance)
        assert instance.get_daemon_heartbeats().get("BACKFILL") is None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in ours(dagster_home):
            p.kill()


def test_a_live_daemon_of_ours_still_counts(tmp_path, monkeypatch):
    """The other side: a daemon of ours that runs is serving, with its record; stopped
    cleanly, it no longer is, and nothing of it is left running."""
    from orchestration import daemon

    instance, dagster_home, proc = _serving_daemon(tmp_path, monkeypatch)
    try:
        assert daemon.serving(instance)
        assert len(list((dagster_home / "daemons").glob("*.json"))) == 1
    finally:
        daemon.stop(proc, instance)
    assert not daemon.serving(instance)
    wait(lambda: not ours(dagster_home) or None, 30,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(dagster_home)]}")


def test_a_run_that_ended_without_a_step_failure_says_why(tmp_path):
    """A run whose worker died, or that was cancelled, has no step failure to quote: its
    line in `yunque run`'s summary gives the first line of the run's own end event."""
    import dagster as dg

    from orchestration import follower

    @dg.asset
    def one() -> int:
        return 1

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        run = instance.get_run_by_id(dg.materialize([one], instance=instance).run_id)
        instance.report_run_failed(run, message="Run worker process exited with code -9.\nMore detail.")
        report = follower.Follower(instance, "no-backfill")._report(run.with_status(dg.DagsterRunStatus.FAILURE))
    assert report.error == f"run failure: Run worker process exited with code -9. (run's logs: UI > Runs > {run.run_id[:8]})"


def test_an_unwritable_home_is_one_line_and_status_2(tmp_path):
    """An infrastructure fault (here the home's place is a file, so nothing can be written
    under it) gives one line naming what failed, the traceback in a file that line names,
    and status 2; not a traceback on the terminal."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    done = subprocess.run([sys.executable, "-m", "yunque.cli", "--home", str(blocker / "home"), "run", "--corpus",
                           str(corpus), "--select", "raw_documents"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("yunque run: NotADirectoryError:") and "run the same command again" in lines[0]
    saved = Path(lines[0].split("traceback in ")[1].split(")")[0])
    assert "Traceback" in saved.read_text()
    saved.unlink()


def test_runs_in_flight_are_the_ones_another_backfill_started(tmp_path):
    """What `yunque run` waits for before stopping its daemon (and what an orphaned daemon
    waits for): runs being started or executed that are not its backfill's."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from orchestration import client

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        for run_id, status, backfill in (("a" * 36, dg.DagsterRunStatus.STARTED, "mine"),
                                         ("b" * 36, dg.DagsterRunStatus.STARTING, "theirs"),
                                         ("c" * 36, dg.DagsterRunStatus.SUCCESS, "theirs"),
                                         ("d" * 36, dg.DagsterRunStatus.CANCELED, "theirs")):
            instance.add_run(DagsterRun(job_name="shard_job", run_id=run_id, status=status,
                                        tags={client.BACKFILL_TAG: backfill}))
        assert client.runs_in_flight(instance, {"mine"}) == ["b" * 36]
        assert sorted(client.runs_in_flight(instance)) == ["a" * 36, "b" * 36]


def test_a_ui_whose_timing_the_serving_daemon_does_not_have_says_so(tmp_path, monkeypatch):
    """`yunque ui --training-cron ... --sensor-interval ...` keeps them in the home's
    settings; when another daemon of ours already serves the home with other timing (a UI
    opened earlier), this UI says so in one line, with that daemon's pid, instead of
    showing a cadence nobody runs."""
    from stages.store import home as home_settings

    monkeypatch.delenv("YUNQUE_TRAINING_CRON", raising=False)
    monkeypatch.delenv("YUNQUE_SENSOR_INTERVAL", raising=False)
    instance, dagster_home, proc = _serving_daemon(tmp_path, monkeypatch, backfills_only=False)
    home = dagster_home.parent
    ui = subprocess.Popen([sys.executable, "-m", "yunque.cli", "--home", str(home), "ui", "--port", "0",
                           "--training-cron", "*/3 * * * *", "--sensor-interval", "20"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = ui.stderr.readline()
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        ui.wait(timeout=60)
        from orchestration import daemon

        daemon.stop(proc, instance)
    assert line.startswith(f"yunque ui: the daemon serving this home (pid {proc.pid}) ticks with shard sensor every "
                           "60 s, training schedule cron '0 * * * *', not shard sensor every 20 s, training "
                           "schedule cron '*/3 * * * *'"), line
    saved = home_settings.read(home)
    assert (saved.sensor_interval_s, saved.training_cron) == (20, "*/3 * * * *")
    wait(lambda: not ours(dagster_home) or None, 60,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(dagster_home)]}")


def test_a_shard_removed_mid_run_fails_alone_and_the_join_goes_on(tmp_path):
    """A shard folder removed while `yunque run` works: its run fails, naming it; the other
    shards' runs go on, and the whole-corpus join (dedup_index, then deduped_documents)
    runs over the shards that are there, saying which one it left out. Status 0, nothing
    left running, the outputs of a clean run over the remaining corpus."""
    import shutil

    corpus, home, clean_corpus, clean = tmp_path / "corpus", tmp_path / "home", tmp_path / "rest", tmp_path / "clean"
    write_two_shards(corpus)
    add_shard(corpus, "zeta", seed=4)
    shutil.copytree(corpus, clean_corpus, ignore=lambda d, names: ["zeta"] if Path(d) == corpus else [])
    def cmd(home: Path, corpus: Path) -> list[str]:
        return [sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", str(corpus),
                "--select", "*deduped_documents"]
    one_per_run = {**os.environ, "YUNQUE_SHARDS_PER_RUN": "1"}  # zeta's run waits in the queue (2 at once)
    code, out = fault_mid_run(cmd(home, corpus), home / "dagster", lambda: shutil.rmtree(corpus / "zeta"),
                               one_per_run)
    assert code == 0, out
    assert "shard 'zeta' is registered but no longer found" in out, out
    assert "shard zeta left the corpus during the run and failed alone; going on over the shards that are there" in out
    wait(lambda: not ours(home / "dagster") or None, 60,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(home / 'dagster')]}")
    again = subprocess.run(cmd(clean, clean_corpus), capture_output=True, text=True, timeout=600, check=False,
                           env=one_per_run)
    assert again.returncode == 0, again.stdout + again.stderr
    mine = {k: v for k, v in outputs(home).items() if "zeta" not in k}
    assert mine == outputs(clean)


def test_a_ui_opened_earlier_never_undoes_a_run_with_a_new_shard(tmp_path):
    """`yunque ui` open on a home built from one corpus (its daemon serves, its shard
    sensor ticks every 5 s); then `yunque run` on a corpus with one more shard: the run
    goes through the UI's daemon and ends with status 0, and the UI's sensor, which loaded
    the old corpus, keeps the new shard registered."""
    import shutil

    from tests.support.ui_server import YUNQUE, ui, ui_env

    old, new, home = tmp_path / "old", tmp_path / "new", tmp_path / "home"
    write_two_shards(old)
    shutil.copytree(old, new)
    add_shard(new, "nuevo", seed=5)
    first = subprocess.run([YUNQUE, "--home", str(home), "run", "--corpus", str(old), "--select", SELECT],
                           env=ui_env(home), capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    with ui(home):
        done = subprocess.run([YUNQUE, "--home", str(home), "run", "--corpus", str(new), "--select", SELECT],
                              env=ui_env(home), capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "starting a Dagster daemon" not in done.stdout, done.stdout  # the UI's served it
        assert "0 failed" in done.stdout, done.stdout
        time.sleep(12)  # two more ticks of the UI's shard sensor
        registered = set(instance_of(home).get_dynamic_partitions("shards"))
    assert registered == {"foro", "manuales", "nuevo"}
    wait(lambda: not ours(home / "dagster") or None, 60,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(home / 'dagster')]}")


def test_ctrl_c_of_a_run_leaves_the_uis_backfill_on_its_daemon_alone(tmp_path):
    """`yunque run` started the daemon; a backfill launched from the UI (GraphQL, as its
    button does) runs on that daemon. Ctrl-C on `yunque run` cancels the command's own
    backfill, says it waits for the UI's runs, and stops its daemon only after them; the
    UI then starts a daemon of its own and its backfill completes, no run of it failed."""
    import dagster as dg

    from tests.support.ui_server import LAUNCH, YUNQUE, graphql, ui, ui_env, wait_for

    corpus, home = tmp_path / "corpus", tmp_path / "home"
    write_two_shards(corpus)
    add_shard(corpus, "grande", seed=3, docs=6000)  # the command still works when the UI is up
    cli = subprocess.Popen([YUNQUE, "--home", str(home), "run", "--corpus", str(corpus), "--select", SELECT],
                           env=ui_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        wait(lambda: run_worker(home / "dagster"), 180, "the command's first run")
        with ui(home) as url:
            instance = instance_of(home)
            # The UI's backfill works on a shard the command never saw (registered as the
            # shard sensor would), so its run is real work still going when Ctrl-C has
            # cancelled the command's backfill: on shards the command had already done,
            # the UI's runs were cache hits that could all end first (a flake, once).
            add_shard(corpus, "enorme", seed=4, docs=6000)
            instance.add_dynamic_partitions("shards", ["enorme"])
            keys = ["raw_documents", "clean_documents", "filtered_documents", "minhash_signatures"]
            out = graphql(url, LAUNCH, {"p": {"assetSelection": [{"path": [k]} for k in keys],
                                              "partitionNames": ["enorme"], "title": "from the UI"}})
            backfill = out["launchPartitionBackfill"]["backfillId"]
            wait_for("a run of the UI's backfill at work", lambda: instance.get_runs(filters=dg.RunsFilter(
                tags={"dagster/backfill": backfill}, statuses=[dg.DagsterRunStatus.STARTED])), 300, poll=0.5)
            os.killpg(cli.pid, signal.SIGINT)
            said, _ = cli.communicate(timeout=300)
            status = wait_for("the UI's backfill to end", lambda: (b := instance.get_backfill(backfill)).status.value
                              not in ("REQUESTED", "CANCELING", "FAILING") and b.status.value, 600)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == 130, said
    assert "runs this command did not submit, which its daemon is running" in said, said
    assert status == "COMPLETED_SUCCESS", said
    # the command's own backfill was cancelled, and none of its runs is left queued or at work
    # (the command's: the UI's daemon may request one of its own for the new shard's
    # downstream assets, by their automation conditions, and leave it to the next daemon)
    own = [b for b in instance.get_backfills() if b.tags.get("yunque/command") == "run"]
    assert len(own) == 1 and own[0].status.value == "CANCELED", [(b.backfill_id, b.status) for b in own]
    own_runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": own[0].backfill_id}))
    assert own_runs and not [r.run_id for r in own_runs if not r.is_finished], [r.status for r in own_runs]
    assert any(r.status == dg.DagsterRunStatus.CANCELED for r in own_runs), [r.status for r in own_runs]
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill}))
    assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [r.status for r in runs]
    wait(lambda: not ours(home / "dagster") or None, 60,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(home / 'dagster')]}")


def test_a_failure_raised_from_a_raw_error_is_what_the_line_says(tmp_path):
    """A stage that explains a raw error (a training's `exit code -9`) by raising a
    `dg.Failure` from it: the summary line and the retry line give that explanation,
    without Dagster's class path, not the raw error underneath."""
    import dagster as dg
    from dagster._core.events import DagsterEventType

    from orchestration import follower

    calls = {"n": 0}

    @dg.asset(retry_policy=dg.RetryPolicy(max_retries=1))
    def trained() -> int:
        calls["n"] += 1
        try:
            raise RuntimeError("External execution process failed with code -9")
        except RuntimeError as e:
            raise dg.Failure("trained: killed (SIGKILL): the OOM killer, or kill -9\n(records in x)") from e

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        result = dg.materialize([trained], instance=instance, raise_on_error=False)
        run = instance.get_run_by_id(result.run_id)
        report = follower.Follower(instance, "no-backfill")._report(run)
        retry = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY).records[0]
    assert calls["n"] == 2
    assert report.error == "trained: trained: killed (SIGKILL): the OOM killer, or kill -9\n(records in x)"
    assert follower._cause(retry.event_log_entry.dagster_event.step_retry_data.error) == \
        "trained: killed (SIGKILL): the OOM killer, or kill -9"


def test_a_ctrl_c_while_a_child_is_spawned_waits_for_its_handle():
    """`yunque ui` and `yunque run` spawn the webserver and the daemon under
    `interrupts_held`: a Ctrl-C landing inside Popen is raised once the handle is kept, so
    the `finally` that stops the children sees this one too (CI once left a webserver
    running after a Ctrl-C that came while it was being spawned)."""
    from orchestration.daemon import interrupts_held

    # as in a terminal (a suite started in the background inherits SIGINT ignored)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        kept = []
        with pytest.raises(KeyboardInterrupt), interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the default handler would have raised by now
            kept.append("handle")
        assert kept == ["handle"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was
        # a process that ignores SIGINT (a background job) still ignores it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_kill_9_of_the_webserver_leaves_no_code_server_behind(tmp_path):
    """`yunque ui` sees its webserver die and ends (exit 1, one line), taking the
    webserver's code server with it rather than leaving it to its 45-s heartbeat timeout."""
    import psutil

    from tests.support.ui_server import free_port, ui_env, wait_for

    home = tmp_path / "home"
    port = free_port()
    ui = subprocess.Popen([str(Path(sys.executable).with_name("yunque")), "--home", str(home), "ui", "--port",
                           str(port)], env=ui_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    try:
        def webserver_with_code_server():
            for child in psutil.Process(ui.pid).children():
                if "dagster-webserver" in " ".join(child.cmdline()) and child.children():
                    return child
            return None
        webserver = wait_for("the webserver and its code server", webserver_with_code_server, 180, 1)
        group = os.getpgid(webserver.pid)
        code_servers = webserver.children()
        os.kill(webserver.pid, signal.SIGKILL)
        _, err = ui.communicate(timeout=60)
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
    assert ui.returncode == 1
    assert err.strip().splitlines()[-1].startswith("yunque ui: ") and "exited with code -9" in err
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in code_servers)
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)
