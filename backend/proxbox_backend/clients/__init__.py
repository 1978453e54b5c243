"""HTTP adapters at the edge: Proxmox VE and NetBox clients over one resilient transport."""
