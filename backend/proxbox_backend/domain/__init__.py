"""The sync's own words: inventory, plans, counters. No HTTP, no I/O."""
