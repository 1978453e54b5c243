-- The size a disk image declares for the guest (a qcow2 header's virtual size),
-- where it differs from the file's size.  `import-from` allocates a disk this
-- big, as qemu-server sizes it by `qemu-img info`.  NULL: the file's size.
ALTER TABLE volumes ADD COLUMN virtual_size bigint;
