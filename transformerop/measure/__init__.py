"""Measurement: timing (the one wrapper every task uses), napkin math, profiling."""
