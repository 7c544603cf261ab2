"""Vendue on real network hosts on one machine: Linux network namespaces on a bridge (netns.py), a thread per
host that starts its processes inside it (hosts.py), and LocalCluster's components spread over them
(multihost.py). Shared by the partition tests here and by the benchmarks; needs root and `ip`."""
