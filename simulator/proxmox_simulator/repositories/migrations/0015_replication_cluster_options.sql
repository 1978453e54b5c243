-- /etc/pve/replication.cfg jobs with their run state, and datacenter.cfg.
CREATE TABLE replication_jobs (
    id         text PRIMARY KEY,            -- "<vmid>-<jobnum>"
    vmid       int NOT NULL,
    jobnum     int NOT NULL,
    target     text NOT NULL,
    options    jsonb NOT NULL,
    version    int NOT NULL DEFAULT 1,
    last_sync  bigint NOT NULL DEFAULT 0,
    last_try   bigint NOT NULL DEFAULT 0,
    fail_count int NOT NULL DEFAULT 0,
    error      text,
    log        jsonb NOT NULL DEFAULT '[]'
);
CREATE UNIQUE INDEX replication_jobs_target_idx ON replication_jobs (vmid, target);

CREATE TABLE cluster_options (
    id      int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    options jsonb NOT NULL DEFAULT '{}',
    version int NOT NULL DEFAULT 1
);
INSERT INTO cluster_options (id) VALUES (1);
