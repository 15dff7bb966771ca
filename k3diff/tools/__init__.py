"""Measuring tools of k3diff (`python -m k3diff.tools.<name>`)."""
