"""A tiny calculator library used by sandfleet's quickstart dataset."""
