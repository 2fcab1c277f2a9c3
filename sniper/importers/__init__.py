"""Importers: other trace formats (YARN SLS and Rumen jobs, Kubernetes pod lists) into a Sniper trace and
queues.yaml."""
