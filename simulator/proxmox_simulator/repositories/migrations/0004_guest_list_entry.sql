-- Each guest's entry of GET /nodes/{node}/{qemu,lxc}, rendered when the row is
-- written instead of on every read.  Only "uptime" depends on the clock, so the
-- list query appends it to the stored fragment (see repositories/guests.py).

ALTER TABLE guests ADD COLUMN list_entry text;

CREATE FUNCTION render_guest_list_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.list_entry := json_strip_nulls(json_build_object(
        'vmid', NEW.vmid,
        'name', nullif(NEW.name, ''),
        'status', CASE WHEN NEW.status = 'paused' THEN 'running' ELSE NEW.status END,
        'qmpstatus', CASE WHEN NEW.type = 'qemu' THEN NEW.status END,
        'cpus', NEW.cpus,
        'maxmem', NEW.maxmem,
        'mem', CASE WHEN NEW.status = 'stopped' THEN 0 ELSE NEW.maxmem * 2 / 5 END,
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

CREATE TRIGGER guests_list_entry
BEFORE INSERT OR UPDATE ON guests
FOR EACH ROW EXECUTE FUNCTION render_guest_list_entry();

UPDATE guests SET list_entry = NULL;  -- the trigger renders every existing row
