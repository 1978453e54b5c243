-- The last verification of a Proxmox Backup Server snapshot (a PBS verify job's
-- outcome and task).  NULL: never verified.  PVE's content listing of a `pbs`
-- storage carries it as `verification: {state, upid}`.
ALTER TABLE volumes ADD COLUMN verify_state text CHECK (verify_state IN ('ok', 'failed'));
ALTER TABLE volumes ADD COLUMN verify_upid text;
ALTER TABLE volumes ADD CONSTRAINT volumes_verification_whole
    CHECK ((verify_state IS NULL) = (verify_upid IS NULL));
