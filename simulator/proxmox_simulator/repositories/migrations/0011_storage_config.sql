-- storage.cfg beyond the columns the inventory reads: every other declared
-- option of a storage section, and a version for compare-and-swap writes.
ALTER TABLE storages ADD COLUMN options jsonb NOT NULL DEFAULT '{}';
ALTER TABLE storages ADD COLUMN version int NOT NULL DEFAULT 1;
