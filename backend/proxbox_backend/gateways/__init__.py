"""Gateways: the sync's questions to Proxmox and NetBox, in domain terms."""
