"""The plugin's part of NetBox's OpenAPI document says what its endpoints answer.

Regression tests of what the schema fuzzing (e2e/test_plugin_api_fuzz.py) found.
"""

import pytest

pytestmark = pytest.mark.django_db


# Generating the document takes most of a minute on a loaded CI machine: once per module.
_generated: dict = {}


@pytest.fixture
def openapi(admin_client):
    from django.core.cache import cache

    if not _generated:
        # NetBox caches the schema page for a day per release: a copy from an earlier run
        # (other code) would be tested instead of this code's schema.
        cache.clear()
        # Through NetBox's own view: its generator needs a request to resolve bulk operations.
        response = admin_client.get("/api/schema/", {"format": "json"})
        assert response.status_code == 200
        _generated.update(response.json())
    return _generated


def _response_schema(openapi, path: str, method: str, status: str) -> dict:
    content = openapi["paths"][path][method]["responses"][status]["content"]
    reference = content["application/json"]["schema"]["$ref"]
    return openapi["components"]["schemas"][reference.rsplit("/", 1)[1]]


def test_an_endpoint_without_a_native_cluster_is_documented(openapi):
    endpoint = _response_schema(
        openapi, "/api/plugins/proxbox/endpoints/proxmox/{id}/", "get", "200"
    )
    assert endpoint["properties"]["netbox_cluster"].get("nullable") is True
    for relation in ("site", "tenant"):
        assert endpoint["properties"][relation].get("nullable") is True
    # An unset removed-guest policy is answered as null (the backend's setting applies).
    assert endpoint["properties"]["removed_guests"].get("nullable") is True


def test_the_actions_document_their_refusals(openapi):
    actions = [
        ("/api/plugins/proxbox/endpoints/proxmox/{id}/sync/", "post"),
        ("/api/plugins/proxbox/endpoints/proxmox/{id}/preview/", "post"),
        ("/api/plugins/proxbox/endpoints/proxmox/{id}/sync-cluster/", "post"),
        ("/api/plugins/proxbox/endpoints/proxmox/{id}/credentials/", "get"),
        # The other plugin's lifecycle actions, found undocumented by the e2e fuzzing.
        ("/api/plugins/script-projects/project-revisions/{id}/activate/", "post"),
        ("/api/plugins/script-projects/project-revisions/{id}/deactivate/", "post"),
    ]
    for path, method in actions:
        documented = set(openapi["paths"][path][method]["responses"])
        assert {"400", "403", "404", "409"} <= documented, (path, documented)


def test_the_compliance_list_documents_its_page_and_a_refused_filter(openapi):
    responses = openapi["paths"]["/api/plugins/proxbox/compliance/"]["get"]["responses"]
    assert {"200", "400"} <= set(responses)
    page = _response_schema(openapi, "/api/plugins/proxbox/compliance/", "get", "200")
    assert {"count", "next", "previous", "results"} <= set(page["properties"])
    vmid = next(
        p
        for p in openapi["paths"]["/api/plugins/proxbox/compliance/"]["get"]["parameters"]
        if p["name"] == "vmid"
    )
    assert vmid["schema"]["type"] == "array"  # NetBox's multi-value filter: ?vmid=1&vmid=2
    assert vmid["schema"]["items"]["type"] == "integer"
