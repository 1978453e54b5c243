-- Backup jobs, HA and firewall configuration, each a versioned row: writers
-- compare-and-swap the version, and PVE's "digest" is derived from it.

-- vzdump archives carry notes and a protection flag (PVE's .notes/.protected files).
ALTER TABLE volumes ADD COLUMN notes text NOT NULL DEFAULT '';
ALTER TABLE volumes ADD COLUMN protected boolean NOT NULL DEFAULT false;

-- /etc/pve/jobs.cfg vzdump sections.
CREATE TABLE backup_jobs (
    id      text PRIMARY KEY,
    options jsonb NOT NULL,
    version int NOT NULL DEFAULT 1
);

-- /etc/pve/ha/groups.cfg and resources.cfg.
CREATE TABLE ha_groups (
    group_id text PRIMARY KEY,
    options  jsonb NOT NULL,
    version  int NOT NULL DEFAULT 1
);

CREATE TABLE ha_resources (
    sid     text PRIMARY KEY,             -- "vm:100" / "ct:101"
    type    text NOT NULL CHECK (type IN ('vm', 'ct')),
    vmid    int NOT NULL UNIQUE,
    options jsonb NOT NULL,
    version int NOT NULL DEFAULT 1
);

-- One firewall configuration file per scope: "cluster", "node/<node>",
-- "vm/<vmid>" and "group/<name>" (a security group's rules).  Rule order is
-- the array order, exactly as PVE keeps it in the file.
CREATE TABLE firewall_configs (
    scope   text PRIMARY KEY,
    options jsonb NOT NULL DEFAULT '{}',
    rules   jsonb NOT NULL DEFAULT '[]',
    aliases jsonb NOT NULL DEFAULT '{}',
    ipsets  jsonb NOT NULL DEFAULT '{}',
    version int NOT NULL DEFAULT 1
);
