"""VariableTracker families, one file each; builder.py wraps real values."""
