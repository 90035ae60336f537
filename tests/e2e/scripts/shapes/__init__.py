"""A helper package beside the scripts, imported through PYTHONPATH=/app."""

HIDDEN = 8
