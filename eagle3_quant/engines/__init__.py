"""What the serving engines do with an artifact: runtime layer names and the replay of their loading rules;
and the one place that runs an engine in its own interpreter (`runner.py`, `environment.py`)."""
