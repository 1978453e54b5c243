"""Reading the plugin's endpoint record as the REST API serves it."""

from proxbox_backend.domain.endpoint import Endpoint

# What NetBox's REST API answers for an endpoint: choices come as {value, label} objects.
SERVED = {
    "id": 7,
    "name": "demo-pve",
    "host": "127.0.0.1",
    "port": 8443,
    "mode": {"value": "standalone", "label": "Standalone node"},
    "site": {"id": 3, "name": "Demo"},
    "tenant": None,
}


def test_declared_mode_is_the_choice_value_not_the_choice_object():
    assert Endpoint.from_api(SERVED).mode == "standalone"
    assert Endpoint.from_api({**SERVED, "mode": "cluster"}).mode == "cluster"
    assert Endpoint.from_api({**SERVED, "mode": None}).mode == "cluster"
    assert Endpoint.from_api({**SERVED, "mode": {"value": None, "label": ""}}).mode == "cluster"
