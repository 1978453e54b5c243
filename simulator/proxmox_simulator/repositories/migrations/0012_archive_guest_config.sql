-- A vzdump archive carries the guest's configuration (qemu-server.conf /
-- pct.conf inside the archive): restore and extractconfig read it back.
ALTER TABLE volumes ADD COLUMN guest_config jsonb;
