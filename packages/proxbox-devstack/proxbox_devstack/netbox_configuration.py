"""NETBOX_CONFIGURATION module of the dev stack and the test suites."""

from proxbox_devstack.netbox_settings import build_configuration

globals().update(build_configuration())
