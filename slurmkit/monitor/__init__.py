"""Monitoring: the metric table (metrics.py), the hooks' textfile (textfile.py), the cluster exporter
(exporter.py), and the generated Prometheus/Grafana files (generate.py)."""
