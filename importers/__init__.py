"""Importers: other trace formats (YARN SLS jobs, Kubernetes pod lists) into a Sniper trace and queues.yaml."""
