"""Local models as a backend: ``airlane serve --model-dir DIR`` (the ``local`` extra).

A causal language model and its tokenizer from a directory (`load_model`), generating off the
event loop with cancellation and backpressure that reach the model (`LocalModelBackend`).
Importing this package does not import torch or transformers; loading a model does.
"""

from airlane.backends.local.backend import LocalModelBackend, LocalStats
from airlane.backends.local.model import LoadedModel, ModelDirError, load_model

__all__ = ["LoadedModel", "LocalModelBackend", "LocalStats", "ModelDirError", "load_model"]
