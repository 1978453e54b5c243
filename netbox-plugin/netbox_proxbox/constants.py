"""Names and limits used across the plugin, in one place."""

# Custom object-permission action on netbox_proxbox.proxmoxendpoint: whoever holds it on an
# endpoint may read that endpoint's decrypted Proxmox API token (meant for the sync backend).
REVEAL_CREDENTIALS_ACTION = "reveal_credentials"

# Shortest API token secret accepted. PVE generates 36-character UUIDs; a short secret
# (a word like "proxmox") cannot be masked in logs without garbling every line that
# happens to contain it.
MIN_TOKEN_SECRET_LENGTH = 16

# PLUGINS_CONFIG["netbox_proxbox"] defaults for "Sync now".
DEFAULT_SYNC_TIMEOUT = 3600  # seconds a Job waits for the backend's run to finish
DEFAULT_SYNC_POLL_INTERVAL = 2.0  # seconds between GET /runs/{id}
DEFAULT_BACKEND_REQUEST_TIMEOUT = 30.0  # seconds per HTTP request to the backend
# The RQ queue of sync Jobs: the plugin declares queue "sync", which NetBox registers as
# "<plugin>.sync". Syncs run for minutes; on their own queue (and worker) they never hold
# the worker that serves NetBox's own queues (high, default, low).
PLUGIN_SYNC_QUEUE = "sync"
DEFAULT_SYNC_QUEUE = f"netbox_proxbox.{PLUGIN_SYNC_QUEUE}"
# RQ kills a job at its job_timeout; give the Job room to record a timeout itself first.
RQ_TIMEOUT_MARGIN = 120

# Scheduled syncs (minutes). Below the minimum a run of a mid-sized cluster could still be
# going when the next one is due; NetBox itself never reschedules sooner than one minute.
MIN_SYNC_INTERVAL = 5
MAX_SYNC_INTERVAL = 7 * 24 * 60
# Live sync: seconds between the backend watcher's polls of an endpoint's Proxmox (two
# light requests each; PVE itself refreshes guest status every 10 s).
MIN_WATCH_INTERVAL = 1
MAX_WATCH_INTERVAL = 3600
# How often the system job re-checks that every endpoint's schedule is in place (minutes).
SCHEDULE_KEEPER_INTERVAL = 15
# PostgreSQL advisory lock (class id, endpoint pk) held while a sync Job of that endpoint
# runs: a second Job of the same endpoint that starts meanwhile is coalesced into it.
SYNC_LOCK_CLASS = 0x50425358  # "PBSX"
