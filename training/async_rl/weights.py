"""Weights from the trainer to the engines: the ``WeightSync`` interface and its file implementation.

The trainer publishes each new policy version; engines pick up the newest one between requests, so several engines
may generate at different versions at once (multi-version asynchronous RL) and every completion says which version
produced it. ``FileWeightSync`` writes versioned safetensors under a directory (the run's directory under the data
root by default), which works on a CPU and across machines that share the data root: the file is written whole,
then a ``latest`` pointer is replaced atomically, so a reader never sees half a version. Old versions beyond
``keep`` are removed.

Engines load a published version from its file (``load_weights(path, version)``): ``hf:`` in-process, ``vllm:``
through its workers (``inference.vllm_engine.WeightLoader``), ``openai:`` by asking the server (``gymforge serve``'s
``/v1/load_weights``, ``vllm serve``'s development endpoints), which must read the same directory. The vLLM paths
need CUDA and are exercised only where a GPU is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol


class WeightSync(Protocol):
    def publish(self, state_dict: dict[str, Any], version: int) -> None: ...

    def reset(self, state_dict: dict[str, Any], version: int) -> None:
        """Make ``version`` (these weights) the newest, dropping any later one (a resumed run)."""

    def latest(self) -> int | None: ...

    def path(self, version: int) -> Path:
        """The safetensors file of ``version``, which engines load (``load_weights``)."""


class FileWeightSync:
    LATEST = "latest"

    def __init__(self, directory: str | os.PathLike[str], keep: int = 4) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, version: int) -> Path:
        return self.directory / f"v{version:06d}.safetensors"

    def publish(self, state_dict: dict[str, Any], version: int) -> None:
        from safetensors.torch import save_file

        final = self.path(version)
        partial = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        # Tied embeddings share storage; safetensors refuses shared tensors, so each is saved as its own copy.
        save_file({name: tensor.detach().cpu().contiguous().clone() for name, tensor in state_dict.items()},
                  str(partial))
        partial.replace(final)
        pointer = self.directory / f".{self.LATEST}.{os.getpid()}.tmp"
        pointer.write_text(str(version))
        pointer.replace(self.directory / self.LATEST)
        for old in sorted(self.directory.glob("v*.safetensors"))[: -self.keep]:
            old.unlink(missing_ok=True)

    def reset(self, state_dict: dict[str, Any], version: int) -> None:
        """Make ``version`` (these weights) the newest: a resumed run drops what the killed run published after its
        checkpoint, so no engine loads weights from a future that did not happen."""
        for path in self.directory.glob("v*.safetensors"):
            if int(path.stem[1:]) > version:
                path.unlink()
        if version:
            self.publish(state_dict, version)
        else:
            (self.directory / self.LATEST).unlink(missing_ok=True)

    def latest(self) -> int | None:
        try:
            return int((self.directory / self.LATEST).read_text())
        except (FileNotFoundError, ValueError):
            return None
