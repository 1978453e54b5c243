// Drives the simulator with the npm `proxmox-api` client (its calls mirror
// PVE's API paths; its types are generated from PVE's own schema).  Reads one
// JSON argument, prints one JSON object: what each call answered.
import proxmoxApi from "proxmox-api";

const cfg = JSON.parse(process.argv[2]);
const root = proxmoxApi({
  host: "127.0.0.1",
  port: cfg.port,
  username: "root@pam",
  password: cfg.password,
});
const node = root.nodes.$(cfg.node);
const guest = node.qemu.$(cfg.vmid);
const out = {};

async function finished(upid) {
  for (let i = 0; i < 500; i++) {
    const status = await node.tasks.$(upid).status.$get();
    if (status.status === "stopped") return status.exitstatus;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`task ${upid} did not finish`);
}

async function refused(call) {
  try {
    await call();
  } catch (error) {
    return error.message;
  }
  return null;
}

// Guest: create, config get/set, start, stop.
out.create = await finished(
  await node.qemu.$post({
    vmid: cfg.vmid,
    name: `npm-${cfg.vmid}`,
    memory: 512,
    cores: 1,
    scsi0: "local-lvm:1",
    net0: "virtio,bridge=vmbr0",
    tags: "npm",
  }),
);
out.config = await guest.config.$get();
out.set = await guest.config.$put({ memory: 1024, description: "set by proxmox-api" });
out.configAfterSet = await guest.config.$get();
out.badSet = await refused(() => guest.config.$put({ memory: 1 }));
out.start = await finished(await guest.status.start.$post());
out.running = await guest.status.current.$get();
out.stop = await finished(await guest.status.stop.$post());
out.stopped = await guest.status.current.$get();

// Storage: the node's storages taking images, and the guest's volume.
out.storages = await node.storage.$get({ content: "images" });
out.content = await node.storage.$("local-lvm").content.$get({ vmid: cfg.vmid });

// Access: a user, an ACL given with list parameters, an API token, and that
// token used by a second client.
await root.access.users.$post({ userid: cfg.user, comment: "made by proxmox-api" });
out.acl = await root.access.acl.$put({
  path: `/vms/${cfg.vmid}`,
  users: [cfg.user],
  roles: ["PVEVMUser", "PVEAuditor"],
});
out.token = await root.access.users.$(cfg.user).token.$(cfg.tokenid).$post({
  privsep: false,
  comment: "proxmox-api token",
});
out.tokens = await root.access.users.$(cfg.user).token.$get();
const scoped = proxmoxApi({
  host: "127.0.0.1",
  port: cfg.port,
  tokenID: out.token["full-tokenid"],
  tokenSecret: out.token.value,
});
out.tokenResources = await scoped.cluster.resources.$get({ type: "vm" });
out.tokenConfig = await scoped.nodes.$(cfg.node).qemu.$(cfg.vmid).config.$get();
out.tokenWrite = await refused(() =>
  scoped.nodes.$(cfg.node).qemu.$(cfg.vmid).config.$put({ memory: 2048 }),
);

process.stdout.write(JSON.stringify(out));
