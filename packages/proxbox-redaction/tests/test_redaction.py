"""The redactor sits in front of every handler: records of any logger, handlers added
after installation, formatted tracebacks, and uncaught exceptions."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import textwrap

import pytest

import proxbox_redaction
from proxbox_redaction import Redactor, redact_url

SECRET = "s3cr3t-Gz81kq0Lx"


@pytest.fixture
def installed():
    redactor = proxbox_redaction.install(patterns=[re.compile(r"(Bearer )\S+")], secrets=[SECRET])
    yield redactor
    proxbox_redaction.uninstall()


def _stream_logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    # A handler of its own on a non-propagating logger: no pytest capture handler helps.
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream


def test_records_of_child_loggers_reach_late_handlers_redacted(installed):
    logger, stream = _stream_logger("proxbox_test.child.grandchild")
    logger.warning("retrying with %s", SECRET)
    logger.warning("header %s %s", "Authorization: Bearer", "abc.def")
    logger.info("as dict %(token)s", {"token": SECRET})
    logger.info("an object %s", RuntimeError(f"failed for {SECRET}"))
    logger.info("numbers stay numbers: %d %.1f", 3, 2.5)
    output = stream.getvalue()
    assert SECRET not in output and "abc.def" not in output
    assert output.count("***") == 4
    assert "numbers stay numbers: 3 2.5" in output


def test_tracebacks_and_stack_are_redacted(installed):
    logger, stream = _stream_logger("proxbox_test.exc")
    try:
        raise ValueError(f"cannot connect to postgresql://sync:{SECRET}x@db/x")
    except ValueError:
        logger.exception("failed")
    logger.info("here", stack_info=True)
    output = stream.getvalue()
    assert "ValueError: cannot connect to postgresql://sync:***@db/x" in output
    assert SECRET not in output


def test_uninstalled_records_keep_their_text():
    logger, stream = _stream_logger("proxbox_test.plain")
    logger.warning("value %s", SECRET)
    assert SECRET in stream.getvalue()


def test_uncaught_exceptions_in_a_process_are_printed_redacted():
    program = textwrap.dedent(
        f"""
        import threading, proxbox_redaction
        proxbox_redaction.install(secrets=["{SECRET}"])
        t = threading.Thread(target=lambda: (_ for _ in ()).throw(RuntimeError("{SECRET}")))
        t.start(); t.join()
        raise RuntimeError("redis://:{SECRET}@127.0.0.1:6379/0")
        """
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert result.returncode == 1
    assert SECRET not in result.stderr
    assert "RuntimeError: redis://:***@127.0.0.1:6379/0" in result.stderr
    assert "Exception in thread" in result.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://sync:pw0rd@db:5432/netbox", "postgresql://sync:***@db:5432/netbox"),
        ("redis://:pw0rd@127.0.0.1:6379/3", "redis://:***@127.0.0.1:6379/3"),
        ("rediss://default:pw0rd@cache/0", "rediss://default:***@cache/0"),
        ("host=db user=sync password=pw0rd dbname=x", "host=db user=sync password=*** dbname=x"),
        ("redis://127.0.0.1:6379/3", "redis://127.0.0.1:6379/3"),
        (
            "postgresql://postgres@127.0.0.1:5432/postgres",
            "postgresql://postgres@127.0.0.1:5432/postgres",
        ),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("/runs/x?token=nbt_Gz81kq0Lx", "/runs/x?token=***"),
        ("/runs/x?a=1&access_token=eyJh.b-c&b=2", "/runs/x?a=1&access_token=***&b=2"),
        (
            "http://backend/sync/3?api_key=k9&apikey=k8#top",
            "http://backend/sync/3?api_key=***&apikey=***#top",
        ),
        ("/x?SECRET=s1;client_secret=s2", "/x?SECRET=***;client_secret=***"),
        ("/x?password=p&ticket=PVE:root@pam:65A1::sig", "/x?password=***&ticket=***"),
        ("/login/?csrfmiddlewaretoken=c1&next=/", "/login/?csrfmiddlewaretoken=***&next=/"),
        ("/s3/o?X-Amz-Signature=abc&key=k&sig=s", "/s3/o?X-Amz-Signature=***&key=***&sig=***"),
        ("token=only-a-query-string&limit=5", "token=***&limit=5"),
        # A PVE API token header keeps its id: the backend's and simulator's patterns mask it.
        ("PVEAPIToken=root@pam!sync=5d7c9a1e", "PVEAPIToken=root@pam!sync=5d7c9a1e"),
        # Names that merely contain a short marker are not secrets; nor are empty values.
        ("/x?monkey=banana&keyword=k&token=", "/x?monkey=banana&keyword=k&token="),
        ("/api/dcim/devices/?limit=50&offset=100", "/api/dcim/devices/?limit=50&offset=100"),
    ],
)
def test_secret_query_parameters_are_masked(url, shown):
    assert redact_url(url) == shown
    assert proxbox_redaction.redact(f'127.0.0.1:5 - "GET {url} HTTP/1.1" 200') == (
        f'127.0.0.1:5 - "GET {shown} HTTP/1.1" 200'
    )


def test_an_access_log_line_is_redacted_in_its_arguments(installed):
    """uvicorn's access formatter unpacks the record's arguments: they stay five."""
    logger, stream = _stream_logger("uvicorn.access")
    logger.info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/runs/x?token=nbt_Gz81kq0Lx", "1.1", 200
    )
    record_args = []
    handler = logging.Handler()
    handler.emit = lambda record: record_args.append(record.args)
    logger.addHandler(handler)
    logger.info('%s - "%s %s HTTP/%s" %d', "c", "GET", "/?secret=s3", "1.1", 200)
    assert (
        stream.getvalue().splitlines()[0]
        == 'INFO 127.0.0.1:5 - "GET /runs/x?token=*** HTTP/1.1" 200'
    )
    assert record_args == [("c", "GET", "/?secret=***", "1.1", 200)]


def test_longer_secret_masked_whole():
    assert Redactor(secrets=["abc", "abcdef"])("x abcdef y abc") == "x *** y ***"


def test_short_secret_is_masked_only_as_a_whole_token():
    """A short secret is also part of ordinary words: masking it inside them garbled every
    log line ("address alread*** in use" for the secret "y")."""
    redactor = Redactor(secrets=["proxmox", "y"])
    # (No `token=` here: the query-parameter pattern masks such a value up to the next
    # separator, comma included, whatever its length.)
    line = "address already in use by proxmoxer; secret proxmox, user y: PVEAPIToken=a!b=proxmox"
    assert redactor(line) == (
        "address already in use by proxmoxer; secret ***, user ***: PVEAPIToken=a!b=***"
    )
    assert redactor("proxmox_requests 'proxmox' y\nproxmox") == "proxmox_requests '***' ***\n***"


def test_secret_of_safe_length_is_masked_inside_words_too():
    long_secret = "0f3c2a9e5b1d4c77"
    assert len(long_secret) == proxbox_redaction.WHOLE_TOKEN_BELOW
    assert Redactor(secrets=[long_secret])(f"x{long_secret}y and {long_secret}") == "x***y and ***"


def test_installed_short_secret_leaves_ordinary_words_alone(capsys):
    proxbox_redaction.install(secrets=["y"])
    try:
        logger, stream = _stream_logger("proxbox_test.short")
        logger.error("bind: address already in use (token %s)", "y")
        assert stream.getvalue() == "ERROR bind: address already in use (token ***)\n"
    finally:
        proxbox_redaction.uninstall()


def test_an_argument_that_cannot_be_printed_does_not_make_logging_raise(installed, capsys):
    class Unprintable:
        def __str__(self):
            raise RuntimeError("no")

    logger, stream = _stream_logger("proxbox_test.unprintable")
    logger.warning("value %s and %s", Unprintable(), SECRET)  # reported by logging, not raised
    logger.warning("after it %s", SECRET)
    assert "after it ***" in stream.getvalue()
    # logging's own report of the broken record quotes its arguments: scrubbed too.
    reported = capsys.readouterr().err
    assert "Logging error" in reported and SECRET not in reported


def test_structured_data_keeps_its_keys_when_a_secret_is_a_word():
    """A password like "proxmox" must not turn the report key "proxmox_requests" into
    "***_requests" (the JSON report then lost its keys)."""
    redactor = Redactor(secrets=["proxmox"])
    report = {"proxmox_requests": {"by_method": {"POST": 1}}, "error": "login proxmox failed"}
    assert redactor.data(report) == {
        "proxmox_requests": {"by_method": {"POST": 1}},
        "error": "login *** failed",
    }
    assert redactor.data(["a", ("proxmox", 2)]) == ["a", ["***", 2]]


@pytest.mark.parametrize("blob", ["x" * 200_000, "token" * 40_000, "a=b" * 60_000])
def test_a_long_word_is_redacted_in_linear_time(blob):
    """A blob in a log record (a pickled job, base64) once took minutes: the URL scheme
    was tried from inside every word, each try scanning to its end."""
    import time

    started = time.monotonic()
    assert Redactor()(blob) == blob
    assert time.monotonic() - started < 3
