"""Notifiers: a webhook or an SMTP server that trickles its answer cannot hold modelci past the notifier's
timeout."""

from __future__ import annotations

import time

import pytest
from probes import ANSWER, TricklingReceiver, workload


@pytest.fixture
def trickling():
    receiver = TricklingReceiver()
    yield receiver
    receiver.close()


@pytest.mark.parametrize("retries", [0, 2])
def test_a_trickling_webhook_is_given_up_at_its_timeout_and_the_run_is_kept(project, trickling, retries):
    project.config(f'[[notify]]\nkind = "webhook"\nurl_env = "PROBE_HOOK"\ntimeout = 2\nretries = {retries}\n'
                   'backoff = 0.01\n')
    project.extra_env["PROBE_HOOK"] = trickling.url
    project.workloads(workload("Broken", 'raise RuntimeError("opens an alarm")'))
    done = project.run()
    assert done.returncode == 1, done.stderr  # the failed workload, not the notifier, decides it
    assert "no complete answer within the timeout of 2 s" in done.stdout + done.stderr
    assert trickling.requests == 1  # not retried: a receiver this slow will not be faster next time
    # the client hung up long before the minute the whole answer takes (no wall-clock margin is asserted)
    deadline = time.monotonic() + 30
    while not trickling.sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert trickling.sent and trickling.sent[0] < len(ANSWER) // 2, trickling.sent
    assert project.stored("SELECT status FROM runs") == [("complete",)]
    project.assert_clean(done)


class TricklingSMTPServer(TricklingReceiver):
    """A real SMTP peer on loopback whose greeting comes one byte a second: each read gets a byte in time."""

    answer = b"220 trickle.example ESMTP a greeting that takes a minute to arrive, one byte a second\r\n"
    speaks_first = True


@pytest.fixture
def trickling_smtp():
    server = TricklingSMTPServer()
    yield server
    server.close()


def test_a_trickling_smtp_server_is_given_up_at_its_timeout_and_the_run_is_kept(project, trickling_smtp):
    port = trickling_smtp.sock.getsockname()[1]
    project.config(f'[[notify]]\nkind = "email"\nhost = "127.0.0.1"\nport = {port}\nto = ["team@example.com"]\n'
                   'timeout = 2\nretries = 2\nbackoff = 0.01\n')
    project.workloads(workload("Broken", 'raise RuntimeError("opens an alarm")'))
    done = project.run()
    assert done.returncode == 1, done.stderr  # the failed workload, not the notifier, decides it
    assert "did not take the message within the timeout of 2 s" in done.stdout + done.stderr
    assert trickling_smtp.requests == 1  # not retried: a server this slow will not be faster next time
    deadline = time.monotonic() + 30
    while not trickling_smtp.sent and time.monotonic() < deadline:
        time.sleep(0.05)
    answer = TricklingSMTPServer.answer
    assert trickling_smtp.sent and trickling_smtp.sent[0] < len(answer) // 2, trickling_smtp.sent
    assert project.stored("SELECT status FROM runs") == [("complete",)]
    project.assert_clean(done)
