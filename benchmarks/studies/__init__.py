"""Quality studies: what a scheme or remedy does to acceptance on a given pair (not the tool's speed)."""
