"""Maintenance commands run from the repository root: the lock of tested versions and the latest-releases check."""
