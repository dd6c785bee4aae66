"""What the serving engines do with an artifact: runtime layer names and the replay of their loading rules."""
