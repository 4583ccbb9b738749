"""The C AIRC library (clients/c/airc), checked against the Python codec."""
