"""Loading revision source: verified stored content in a private, per-revision namespace."""
