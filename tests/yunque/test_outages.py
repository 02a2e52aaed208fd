"""Outages an operator meets, tried for real (issue 28): PostgreSQL and the S3 endpoint
stopped mid-run, a full disk, and outputs the store lost. Each ends in success or in
one line that says how to resume, with nothing left running."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.support.factory import add_shard, write_two_shards
from tests.support.fault_runs import SELECT, ours, outage_mid_run, outputs, rerun, wait


def test_a_short_database_outage_is_waited_out(tmp_path, monkeypatch):
    """PostgreSQL stopped and started again 15 s later: a storage call made in between
    waits for it (dagster-postgres alone gives up after about 11 s), and one beyond
    YUNQUE_OUTAGE_GRACE_S fails with the exception `yunque.faults` turns into one line."""
    import threading

    import pytest
    from dagster_postgres.utils import DagsterPostgresException

    from tests.yunque.pg_server import restartable_postgres
    from yunque import env

    with restartable_postgres(tmp_path) as pg:
        monkeypatch.setenv(env.POSTGRES_URL, pg.url)
        monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
        monkeypatch.delenv("YUNQUE_OUTAGE_GRACE_S", raising=False)
        env.use_home(tmp_path / "home")
        from orchestration import client

        instance = client.instance()
        assert list(instance.get_runs()) == []
        pg.stop()
        later = threading.Timer(15, pg.start)
        later.start()
        started = time.monotonic()
        try:
            assert list(instance.get_runs()) == []
        finally:
            later.join()
        assert time.monotonic() - started >= 14

        monkeypatch.setenv("YUNQUE_OUTAGE_GRACE_S", "2")
        pg.stop()
        started = time.monotonic()
        with pytest.raises(DagsterPostgresException, match=r"did not answer for 2 s \(YUNQUE_OUTAGE_GRACE_S\)"):
            instance.get_runs()
        assert time.monotonic() - started < 10
        pg.start()


def test_postgres_stopped_for_20_s_mid_run_is_ridden_out(tmp_path):
    """`yunque run` on a PostgreSQL instance, the server stopped for 20 s while a run
    works and started again: the command, its daemon and its runs wait for it, the command
    ends with status 0, nothing is left running, and the outputs are a clean run's."""
    from tests.yunque.pg_server import restartable_postgres
    from yunque import env

    corpus, home, clean = tmp_path / "corpus", tmp_path / "home", tmp_path / "clean"
    write_two_shards(corpus)
    add_shard(corpus, "grande", seed=3, docs=1500)
    dagster_home = home / "dagster"
    with restartable_postgres(tmp_path) as pg:
        cmd = [sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", str(corpus),
               "--select", SELECT]
        outage_mid_run(cmd, dagster_home, pg.stop, pg.start, env={**os.environ, env.POSTGRES_URL: pg.url})
    assert rerun(clean, corpus).returncode == 0
    assert outputs(home) == outputs(clean)


def test_the_s3_endpoint_stopped_for_20_s_mid_run_is_ridden_out(tmp_path, monkeypatch):
    """The corpus on an S3 endpoint that stops for 20 s while the shards are read, then
    comes back (the same server, its objects intact): the reads wait for it, `yunque run`
    ends with status 0, nothing is left running, and the outputs are a clean run's."""
    import boto3
    from moto.server import ThreadedMotoServer

    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
             "NO_PROXY": "127.0.0.1,localhost"}
    for k, v in creds.items():
        monkeypatch.setenv(k, v)
    corpus, home, clean = tmp_path / "corpus", tmp_path / "home", tmp_path / "clean"
    write_two_shards(corpus)
    add_shard(corpus, "grande", seed=3, docs=1500)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    servers = [server]
    port = server.get_host_and_port()[1]
    endpoint = f"http://127.0.0.1:{port}"
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="outage")
        for f in sorted(p for p in corpus.rglob("*") if p.is_file()):
            s3.upload_file(str(f), "outage", f"corpus/{f.relative_to(corpus).as_posix()}")
        cmd = [sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", "s3://outage/corpus",
               "--s3-endpoint", endpoint, "--select", SELECT]

        def restart() -> None:  # the same port; moto keeps its objects in this process
            servers.append(ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False))
            servers[-1].start()

        outage_mid_run(cmd, home / "dagster", server.stop, restart)
        again = subprocess.run([*cmd[:4], str(clean), *cmd[5:]], capture_output=True, text=True, timeout=600,
                               check=False)
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        servers[-1].stop()
    assert outputs(home) == outputs(clean)


def test_a_full_disk_is_one_line_and_the_same_command_resumes(tmp_path):
    """The home on a 3 MiB tmpfs: the disk fills mid-run. `yunque run` ends with one line
    that says the disk is full (no traceback), nothing of ours is left running, and once
    there is room again the same command finishes with a clean run's outputs."""
    import shutil

    import pytest

    corpus, home, clean = tmp_path / "corpus", tmp_path / "home", tmp_path / "clean"
    write_two_shards(corpus)
    add_shard(corpus, "grande", seed=3, docs=1500)
    home.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(home)],
                                                        capture_output=True, check=False).returncode != 0:
        pytest.skip("mounting a tmpfs is not allowed here (needs root, or CAP_SYS_ADMIN in a container)")
    try:
        full = rerun(home, corpus)
        assert full.returncode in (1, 2), full.stdout + full.stderr
        assert "Traceback" not in full.stdout + full.stderr, full.stdout + full.stderr
        said = [line for line in (full.stdout + full.stderr).splitlines()
                if "disk is full" in line or "disk holding the Dagster instance" in line
                or "No space left on device" in line]
        assert said, full.stdout + full.stderr
        wait(lambda: not ours(home / "dagster") or None, 60,
              f"our processes gone: {[' '.join(p.cmdline()) for p in ours(home / 'dagster')]}")
        subprocess.run(["mount", "-o", "remount,size=64m", str(home)], check=True)
        again = rerun(home, corpus)
        assert again.returncode == 0, again.stdout + again.stderr
        wait(lambda: not ours(home / "dagster") or None, 60,
              f"our processes gone: {[' '.join(p.cmdline()) for p in ours(home / 'dagster')]}")
        assert rerun(clean, corpus).returncode == 0
        assert outputs(home) == outputs(clean)
    finally:
        for p in ours(home / "dagster"):
            p.kill()
        subprocess.run(["umount", "-l", str(home)], check=False)


def test_outputs_the_store_lost_are_named_and_materialized_again(tmp_path):
    """Outputs that Dagster records as materialized but the store no longer has (a store
    that lost objects): `yunque run` names them; a selection without them fails in the
    stage that needs them, saying how to repair; the full selection materializes them
    again, with a clean run's outputs."""
    import shutil

    corpus, home, clean = tmp_path / "corpus", tmp_path / "home", tmp_path / "clean"
    write_two_shards(corpus)
    assert rerun(home, corpus).returncode == 0
    shutil.rmtree(home / "data" / "raw_documents" / "foro")
    shutil.rmtree(home / "data" / "filtered_documents" / "foro")

    only = subprocess.run([sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", str(corpus),
                           "--select", "minhash_signatures"], capture_output=True, text=True, timeout=600, check=False)
    assert only.returncode == 1, only.stdout + only.stderr
    assert ("filtered_documents of 1 shards (foro): recorded as materialized in Dagster, but its output is gone from "
            "the store; materialize it again: yunque run --select 'key:filtered_documents'") in only.stdout, only.stdout
    assert "filtered_documents/foro has no output in the store" in only.stdout, only.stdout

    again = rerun(home, corpus)
    assert again.returncode == 0, again.stdout + again.stderr
    assert ("raw_documents of 1 shards (foro): recorded as materialized in Dagster, but its output is gone from the "
            "store; this run materializes it again") in again.stdout, again.stdout
    assert rerun(clean, corpus).returncode == 0
    assert outputs(home) == outputs(clean)
