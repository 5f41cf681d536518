"""Small text utilities used by sandfleet's quickstart dataset."""
