"""Filesystem and process helpers: hashing, atomic output folders, resource checks, interrupts, timers; how numbers
read in every view."""
