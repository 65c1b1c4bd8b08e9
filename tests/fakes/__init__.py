"""In-memory fakes of external systems, for unit tests (no sockets, no processes)."""
