"""NETBOX_CONFIGURATION module of the dev stack and the test suites."""

from proxbox_processes import collect_garbage_less_often

from proxbox_devstack.netbox_settings import build_configuration, install_redaction

_configuration = build_configuration()
globals().update(_configuration)
# Every NetBox process (gunicorn, the RQ worker, manage.py) imports this module first.
install_redaction(_configuration)
collect_garbage_less_often()
