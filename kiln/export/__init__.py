"""Whole-program capture and its file format (export, save, load) and the FX text format."""
