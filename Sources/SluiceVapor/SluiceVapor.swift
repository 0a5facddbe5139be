// SluiceVapor: see docs/servers.md
