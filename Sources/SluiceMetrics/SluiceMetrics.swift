// SluiceMetrics: see docs/servers.md
