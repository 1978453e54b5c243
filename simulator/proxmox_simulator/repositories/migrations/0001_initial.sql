-- Core state of one simulated Proxmox VE cluster.
-- The database is the system of record: no process-global state is authoritative.

CREATE TABLE simulator_settings (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);

-- Singleton row; name NULL means a standalone node (no corosync cluster).
CREATE TABLE cluster (
    id             int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    name           text,
    config_version int NOT NULL DEFAULT 1,
    version        int NOT NULL DEFAULT 1
);

CREATE TABLE nodes (
    node        text PRIMARY KEY,
    nodeid      int NOT NULL UNIQUE,
    ip          text NOT NULL,
    online      boolean NOT NULL DEFAULT true,
    cpus        int NOT NULL,
    maxmem      bigint NOT NULL,
    maxdisk     bigint NOT NULL,
    cpu_model   text NOT NULL,
    pve_version text NOT NULL,
    kversion    text NOT NULL,
    boot_epoch  bigint NOT NULL
);

CREATE TABLE storages (
    storage text PRIMARY KEY,
    type    text NOT NULL,
    content text NOT NULL,
    shared  boolean NOT NULL DEFAULT false,
    path    text,
    nodes   text[],            -- NULL: available on every node
    total   bigint NOT NULL,
    enabled boolean NOT NULL DEFAULT true
);

CREATE TABLE pools (
    poolid  text PRIMARY KEY,
    comment text NOT NULL DEFAULT ''
);

CREATE TABLE pool_storages (
    poolid  text NOT NULL REFERENCES pools ON DELETE CASCADE,
    storage text NOT NULL REFERENCES storages ON DELETE CASCADE,
    PRIMARY KEY (poolid, storage)
);

-- VMIDs are unique cluster-wide across QEMU and LXC: the primary key enforces it.
CREATE TABLE guests (
    vmid        int PRIMARY KEY CHECK (vmid BETWEEN 100 AND 999999999),
    type        text NOT NULL CHECK (type IN ('qemu', 'lxc')),
    node        text NOT NULL REFERENCES nodes ON UPDATE CASCADE,
    name        text NOT NULL,
    status      text NOT NULL CHECK (status IN ('stopped', 'running', 'paused')),
    template    boolean NOT NULL DEFAULT false,
    pool        text REFERENCES pools ON DELETE SET NULL,
    config      jsonb NOT NULL,
    -- What the guest agent (QEMU) or container reports about its interfaces.
    interfaces  jsonb NOT NULL DEFAULT '[]',
    started_at  bigint,          -- clock epoch of the last start, for uptime
    maxmem      bigint NOT NULL,
    maxdisk     bigint NOT NULL,
    cpus        int NOT NULL,
    digest_seq  bigint NOT NULL DEFAULT 1,
    version     int NOT NULL DEFAULT 1
);
CREATE INDEX guests_node_idx ON guests (node, vmid);

CREATE TABLE guest_snapshots (
    vmid        int NOT NULL REFERENCES guests ON DELETE CASCADE,
    name        text NOT NULL,
    parent      text,
    description text NOT NULL DEFAULT '',
    snaptime    bigint NOT NULL,
    vmstate     boolean NOT NULL DEFAULT false,
    config      jsonb NOT NULL,
    PRIMARY KEY (vmid, name)
);

CREATE TABLE volumes (
    volid   text PRIMARY KEY,
    storage text NOT NULL REFERENCES storages ON DELETE CASCADE,
    node    text,                      -- NULL for shared storage
    vmid    int,
    content text NOT NULL,
    format  text NOT NULL,
    size    bigint NOT NULL,
    ctime   bigint NOT NULL
);
CREATE INDEX volumes_storage_idx ON volumes (storage, node);
CREATE INDEX volumes_vmid_idx ON volumes (vmid);

-- Access control -----------------------------------------------------------

CREATE TABLE realms (
    realm   text PRIMARY KEY,
    type    text NOT NULL CHECK (type IN ('pam', 'pve')),
    comment text NOT NULL DEFAULT '',
    is_default boolean NOT NULL DEFAULT false
);

CREATE TABLE users (
    userid        text PRIMARY KEY,
    realm         text NOT NULL REFERENCES realms,
    enable        boolean NOT NULL DEFAULT true,
    expire        bigint NOT NULL DEFAULT 0,
    firstname     text NOT NULL DEFAULT '',
    lastname      text NOT NULL DEFAULT '',
    email         text NOT NULL DEFAULT '',
    comment       text NOT NULL DEFAULT '',
    password_hash text,
    version       int NOT NULL DEFAULT 1
);

CREATE TABLE groups (
    groupid text PRIMARY KEY,
    comment text NOT NULL DEFAULT ''
);

CREATE TABLE group_members (
    groupid text NOT NULL REFERENCES groups ON DELETE CASCADE,
    userid  text NOT NULL REFERENCES users ON DELETE CASCADE,
    PRIMARY KEY (groupid, userid)
);

CREATE TABLE roles (
    roleid  text PRIMARY KEY,
    privs   text[] NOT NULL,
    special boolean NOT NULL DEFAULT false
);

CREATE TABLE api_tokens (
    userid      text NOT NULL REFERENCES users ON DELETE CASCADE,
    tokenid     text NOT NULL,
    secret_hash text NOT NULL,
    privsep     boolean NOT NULL DEFAULT true,
    expire      bigint NOT NULL DEFAULT 0,
    comment     text NOT NULL DEFAULT '',
    -- Bumped on every change so cached secret verifications are invalidated.
    generation  int NOT NULL DEFAULT 1,
    PRIMARY KEY (userid, tokenid)
);

CREATE TABLE acl (
    path      text NOT NULL,
    ugid_type text NOT NULL CHECK (ugid_type IN ('user', 'group', 'token')),
    ugid      text NOT NULL,
    roleid    text NOT NULL REFERENCES roles ON DELETE CASCADE,
    propagate boolean NOT NULL DEFAULT true,
    PRIMARY KEY (path, ugid_type, ugid, roleid)
);

-- Durable tasks -------------------------------------------------------------

CREATE SEQUENCE task_pid_seq START 1000;

CREATE TABLE tasks (
    upid             text PRIMARY KEY,
    node             text NOT NULL,
    pid              int NOT NULL,
    pstart           bigint NOT NULL,
    starttime        bigint NOT NULL,
    type             text NOT NULL,
    id               text NOT NULL DEFAULT '',
    userid           text NOT NULL,
    tokenid          text,
    state            text NOT NULL CHECK (state IN ('queued', 'running', 'stopped')),
    exitstatus       text,
    endtime          bigint,
    payload          jsonb NOT NULL DEFAULT '{}',
    idempotency_key  text UNIQUE,
    lease_owner      text,
    lease_expires_at timestamptz,
    attempts         int NOT NULL DEFAULT 0,
    warnings         int NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX tasks_claim_idx ON tasks (created_at) WHERE state <> 'stopped';
CREATE INDEX tasks_node_idx ON tasks (node, starttime DESC);

CREATE TABLE task_events (
    id     bigserial PRIMARY KEY,
    upid   text NOT NULL REFERENCES tasks ON DELETE CASCADE,
    kind   text NOT NULL,
    worker text,
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    detail jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX task_events_upid_idx ON task_events (upid, id);

CREATE TABLE task_log (
    upid text NOT NULL REFERENCES tasks ON DELETE CASCADE,
    n    int NOT NULL,
    t    text NOT NULL,
    PRIMARY KEY (upid, n)
);

-- One holder per guest or resource; released in the task's finishing transaction.
CREATE TABLE resource_locks (
    resource    text PRIMARY KEY,
    upid        text NOT NULL REFERENCES tasks ON DELETE CASCADE,
    acquired_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
