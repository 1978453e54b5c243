"""Sync now: a NetBox Job that asks the Proxbox sync backend to sync one endpoint."""
