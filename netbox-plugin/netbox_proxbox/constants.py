"""Names and limits used across the plugin, in one place."""

# Custom object-permission action on netbox_proxbox.proxmoxendpoint: whoever holds it on an
# endpoint may read that endpoint's decrypted Proxmox API token (meant for the sync backend).
REVEAL_CREDENTIALS_ACTION = "reveal_credentials"

# PLUGINS_CONFIG["netbox_proxbox"] defaults for "Sync now".
DEFAULT_SYNC_TIMEOUT = 3600  # seconds a Job waits for the backend's run to finish
DEFAULT_SYNC_POLL_INTERVAL = 2.0  # seconds between GET /runs/{id}
DEFAULT_BACKEND_REQUEST_TIMEOUT = 30.0  # seconds per HTTP request to the backend
# RQ kills a job at its job_timeout; give the Job room to record a timeout itself first.
RQ_TIMEOUT_MARGIN = 120
