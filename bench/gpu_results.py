"""How the GPU session's stages write their results (bench/gpu_session.py): JSON files rewritten whole through a
temporary file and a rename, so that a process killed at any moment leaves a readable file. Standard library
only: the install stage runs before Tessera is installed."""

from __future__ import annotations

import json
import time
from pathlib import Path


class StageWriter:
    """A stage's results as one JSON object, rewritten whole (through a temporary file and a rename) after
    every change, so that a stage killed at any moment leaves a readable file."""

    def __init__(self, path: Path):
        self.path, self.data = path, {}
        path.parent.mkdir(parents=True, exist_ok=True)

    def set(self, key: str, value) -> None:
        self.data[key] = value
        self._write()

    def add(self, key: str, record) -> None:
        self.data.setdefault(key, []).append(record)
        self._write()

    def running(self, item) -> None:
        """Say that `item` (JSON) runs from now, or (None) that nothing does: `running` {"item", "since" (epoch
        seconds)}, which gpu_session.run_stage watches against the stage's item limit."""
        self.set("running", None if item is None else {"item": item, "since": time.time()})

    def _write(self) -> None:
        write_json(self.path, self.data)


def write_json(path: Path, data) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, default=str) + "\n")
    temporary.replace(path)
