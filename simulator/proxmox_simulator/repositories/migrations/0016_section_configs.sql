-- Small PVE section-config files whose sections are an ID, a type and
-- options: status.cfg (metrics servers) and mapping/{pci,usb,dir}.cfg.
CREATE TABLE section_configs (
    file    text NOT NULL,
    id      text NOT NULL,
    type    text NOT NULL,
    options jsonb NOT NULL,
    version int NOT NULL DEFAULT 1,
    PRIMARY KEY (file, id)
);
