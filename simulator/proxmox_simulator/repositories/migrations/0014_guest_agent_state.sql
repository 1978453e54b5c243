-- What a simulated guest's QEMU agent remembers between calls: frozen file
-- systems, files written through file-write, exec'd commands and their
-- results; and the cloud-init values last written to its cloud-init drive.
CREATE TABLE guest_agent_state (
    vmid      int PRIMARY KEY REFERENCES guests ON DELETE CASCADE,
    frozen    boolean NOT NULL DEFAULT false,
    next_pid  int NOT NULL DEFAULT 1000,
    cloudinit jsonb          -- NULL: the drive was never generated
);

CREATE TABLE guest_agent_exec (
    vmid    int NOT NULL REFERENCES guests ON DELETE CASCADE,
    pid     int NOT NULL,
    command jsonb NOT NULL,
    result  jsonb NOT NULL,
    PRIMARY KEY (vmid, pid)
);

CREATE TABLE guest_files (
    vmid    int NOT NULL REFERENCES guests ON DELETE CASCADE,
    path    text NOT NULL,
    content bytea NOT NULL,
    PRIMARY KEY (vmid, path)
);
