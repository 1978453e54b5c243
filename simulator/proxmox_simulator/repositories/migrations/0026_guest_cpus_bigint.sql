-- PVE leaves `cores` and `sockets` unbounded above, so a guest's CPU count
-- (cores x sockets) outgrows a 32-bit column long before PVE refuses it, and a
-- running guest's memory use (two fifths of maxmem) is computed without
-- overflowing at the widest maxmem the table holds.
ALTER TABLE guests ALTER COLUMN cpus TYPE bigint;

CREATE OR REPLACE FUNCTION render_guest_list_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.list_entry := json_strip_nulls(json_build_object(
        'vmid', NEW.vmid,
        'name', nullif(NEW.name, ''),
        'status', CASE WHEN NEW.status = 'paused' THEN 'running' ELSE NEW.status END,
        'qmpstatus', CASE WHEN NEW.type = 'qemu' THEN NEW.status END,
        'cpus', NEW.cpus,
        'maxmem', NEW.maxmem,
        'mem', CASE WHEN NEW.status = 'stopped' THEN 0 ELSE div(NEW.maxmem::numeric * 2, 5)::bigint END,
        'maxdisk', NEW.maxdisk,
        'disk', CASE WHEN NEW.type = 'lxc' AND NEW.status <> 'stopped' THEN NEW.maxdisk / 4 ELSE 0 END,
        'maxswap', CASE WHEN NEW.type = 'lxc' THEN 536870912 END,
        'swap', CASE WHEN NEW.type = 'lxc' THEN 0 END,
        'cpu', CASE WHEN NEW.status = 'running' THEN 0.0125 ELSE 0 END,
        'pid', CASE WHEN NEW.status <> 'stopped' THEN 10000 + NEW.vmid END,
        'netin', 0, 'netout', 0, 'diskread', 0, 'diskwrite', 0,
        'template', CASE WHEN NEW.template THEN 1 END,
        'tags', NEW.config->>'tags',
        'lock', NEW.config->>'lock',
        'type', CASE WHEN NEW.type = 'lxc' THEN 'lxc' END
    ))::text;
    RETURN NEW;
END;
$$;
