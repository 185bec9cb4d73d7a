"""Reading safetensors files with NumPy only: the header, then one tensor at a time from a memory map.

A tensor is a view into the mapped file; `SafetensorsFiles.read` hands it to a consumer and then tells the
kernel the pages may go (madvise DONTNEED), so reading a whole checkpoint keeps about one tensor resident.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from ...errors import UsageError, hint

__all__ = ["SafetensorsFiles"]

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def _header(path: Path) -> tuple[dict[str, Any], int]:
    """(tensor table, byte offset of the data) of one safetensors file."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise UsageError(f"{path} is not a safetensors file (shorter than its 8-byte header length)")
        (size,) = struct.unpack("<Q", raw)
        try:
            table = json.loads(f.read(size))
        except (ValueError, UnicodeDecodeError) as err:
            raise UsageError(f"{path} is not a safetensors file: its header is not JSON ({err})") from None
    table.pop("__metadata__", None)
    return table, 8 + size


class SafetensorsFiles:
    """The tensors of a checkpoint folder: `model.safetensors`, or the shards its index names."""

    def __init__(self, folder: Path) -> None:
        index, single = folder / INDEX, folder / SINGLE
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            files = [folder / name for name in shards]
        elif single.is_file():
            files = [single]
        else:
            found = sorted(p.name for p in folder.iterdir())
            raise UsageError(f"{folder} has neither {SINGLE} nor {INDEX} (only safetensors weights are read; "
                             f"convert .bin files with transformers' save_pretrained(safe_serialization=True)); "
                             f"it holds: {', '.join(found) or '(nothing)'}")
        self.where: dict[str, tuple[Path, dict[str, Any], int]] = {}
        for path in files:
            if not path.is_file():
                raise UsageError(f"{INDEX} in {folder} names the shard {path.name}, which is missing")
            table, start = _header(path)
            for name, info in table.items():
                self.where[name] = (path, info, start)
        self.bytes = sum(p.stat().st_size for p in files)
        self._maps: dict[Path, mmap.mmap] = {}

    def names(self) -> list[str]:
        """Every tensor name in the checkpoint."""
        return list(self.where)

    def find(self, name: str) -> str:
        """The stored name of a tensor, also without a leading module prefix (GPT-2's hub files lack `transformer.`)."""
        if name in self.where:
            return name
        bare = name.split(".", 1)[-1]
        if bare in self.where:
            return bare
        raise UsageError(f"the checkpoint has no tensor {name!r}{hint(name, self.names())}; "
                         f"it holds {len(self.where)} tensors, e.g. {', '.join(self.names()[:4])}")

    @contextmanager
    def opened(self) -> Iterator[SafetensorsFiles]:
        """Keep the files mapped while reading; unmapped at the end."""
        try:
            yield self
        finally:
            for m in self._maps.values():
                m.close()
            self._maps = {}

    def read(self, name: str, use: Callable[[np.ndarray], Any]) -> Any:
        """use(view of tensor `name`): the view is valid only during the call (copy what must outlive it)."""
        path, info, start = self.where[self.find(name)]
        if info["dtype"] not in DTYPES:
            raise UsageError(f"tensor {name!r} in {path.name} has dtype {info['dtype']}; readable: {', '.join(DTYPES)}")
        if path not in self._maps:
            with open(path, "rb") as f:
                self._maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mapped = self._maps[path]
        begin, end = (start + offset for offset in info["data_offsets"])
        dtype = np.dtype(DTYPES[info["dtype"]])
        view = np.frombuffer(mapped, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=begin)
        try:
            return use(view.reshape(info["shape"]))
        finally:
            del view
            page = mmap.PAGESIZE
            low = begin - begin % page
            if end > low:
                mapped.madvise(mmap.MADV_DONTNEED, low, end - low)
