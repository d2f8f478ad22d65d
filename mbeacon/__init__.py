"""MBeacon: a privacy-preserving GA4GH Beacon for DNA methylation data."""

__version__ = "0.1.0"
