"""Filesystem and process helpers: hashing, atomic output folders, resource checks, interrupts, timers."""
