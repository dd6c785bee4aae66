"""calib stage."""
