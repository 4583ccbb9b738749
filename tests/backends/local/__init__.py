"""The local-model backend (``airlane serve --model-dir``), on a tiny model the tests make."""
