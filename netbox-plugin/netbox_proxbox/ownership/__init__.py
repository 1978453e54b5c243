"""Endpoint ownership of native clusters: lock order, permissions and the claim service."""
