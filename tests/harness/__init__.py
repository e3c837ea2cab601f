"""Test harness for tests that need a running PostgreSQL (Python 3 standard library only).

Exposes Cluster: a throwaway PostgreSQL 15 cluster in a temporary directory, run as the
`postgres` OS user, reachable only through a unix socket, stopped by PID even when a test fails.
This package must never touch clusters it did not create, never stop a process it did not start,
and never need anything outside the Python standard library.
"""

from .cluster import Cluster, ClusterError, PG_BIN, stop_all_clusters

__all__ = ["Cluster", "ClusterError", "PG_BIN", "stop_all_clusters"]
