"""A fault-injection lab for the cluster: a broker and three gateway nodes as real processes,
clients that publish, generate, resume and consume, a seeded schedule of SIGKILLs, restarts
(same and new node id), pauses and partitions, and checks of every promise afterwards.

``python -m tests.cluster.faultlab --seeds 1-50`` runs many seeds; the test suite runs a few.
"""
