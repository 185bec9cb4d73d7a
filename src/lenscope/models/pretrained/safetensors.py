"""Reading safetensors files with NumPy only: the header, then one tensor at a time from a memory map.

A tensor is a view into the mapped file; `SafetensorsFiles.read` hands it to a consumer and then tells the
kernel the pages may go (madvise DONTNEED), so reading a whole checkpoint keeps about one tensor resident.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import stat
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
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


MAX_HEADER = 100_000_000  # bytes of a header's JSON table (the safetensors format's own limit)


def _bad(path: Path, problem: str) -> UsageError:
    return UsageError(f"{path} is not a valid safetensors file: {problem}")


def _header(path: Path) -> tuple[dict[str, Any], int]:
    """(tensor table, byte offset of the data) of one safetensors file, every entry checked against the file."""
    info = os.stat(path)  # before opening: opening a FIFO would wait for a writer
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path} is not a regular file (a device, FIFO or folder): expected a safetensors file")
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise UsageError(f"{path} is not a safetensors file (shorter than its 8-byte header length)")
        (size,) = struct.unpack("<Q", raw)
        if size > min(MAX_HEADER, info.st_size - 8):
            raise _bad(path, f"its header length {size} exceeds the file ({info.st_size} bytes) or the format's "
                             f"limit ({MAX_HEADER} bytes)")
        try:
            table = json.loads(f.read(size))
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise UsageError(f"{path} is not a safetensors file: its header is not JSON ({err})") from None
    if not isinstance(table, dict):
        raise _bad(path, f"its header is a JSON {type(table).__name__}: expected an object of tensor entries")
    table.pop("__metadata__", None)
    _check_entries(path, table, info.st_size - 8 - size)
    return table, 8 + size


def _check_entries(path: Path, table: dict[str, Any], data: int) -> None:
    """Each entry a known dtype, a shape of non-negative ints and [begin, end) inside the `data` bytes, holding
    exactly prod(shape) * itemsize bytes; no two entries overlapping."""
    spans = []
    for name, entry in table.items():
        where = f"tensor {name!r}"
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise _bad(path, f"{where} is {str(entry)[:80]!r}: expected an object of dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _bad(path, f"{where} has dtype {str(dtype)[:40]!r}; readable: {', '.join(DTYPES)}")
        if not isinstance(shape, list) or not all(_natural(d) for d in shape):
            raise _bad(path, f"{where} has shape {str(shape)[:80]}: expected a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_natural, offsets))
                and offsets[0] <= offsets[1] <= data):
            raise _bad(path, f"{where} has data_offsets {str(offsets)[:80]}: expected [begin, end] with "
                             f"0 <= begin <= end <= {data} (the data section's size)")
        needed = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
        if offsets[1] - offsets[0] != needed:
            raise _bad(path, f"{where} spans {offsets[1] - offsets[0]} bytes, but its shape {shape} of {dtype} "
                             f"needs {needed}")
        spans.append((offsets[0], offsets[1], name))
    spans.sort()
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
        if begin < end:
            raise _bad(path, f"tensors {first!r} and {second!r} overlap in the data section")


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _inside(folder: Path, name: Any) -> Path:
    """The shard `name` of an index, refused unless it is a plain relative name resolving inside the model folder
    (or, in a Hugging Face cache snapshot, inside that repository's blobs folder, where the snapshot links point)."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise UsageError(f"{INDEX} in {folder} names the shard {str(name)[:80]!r}: expected a file name inside the "
                         "model folder (no absolute path, no '..')")
    return _resolved(folder, folder / name)


def _resolved(folder: Path, path: Path) -> Path:
    """`path`, refused when it (a symbolic link) resolves outside the model folder."""
    roots = [folder.resolve()]
    if folder.parent.name == "snapshots":
        roots.append((folder.parent.parent / "blobs").resolve())
    target = path.resolve()
    if not any(target.is_relative_to(root) for root in roots):
        raise UsageError(f"{path} resolves to {target}, outside the model folder {folder}: lenscope reads weights "
                         "only from inside it")
    return path


def _index(folder: Path) -> list[str]:
    """The shard names of the folder's index file, refused unless its weight_map maps names to names."""
    path = folder / INDEX
    try:
        weight_map = json.loads(path.read_text()).get("weight_map")
    except (ValueError, UnicodeDecodeError, RecursionError, AttributeError) as err:
        raise UsageError(f"{path} is not a safetensors index: expected a JSON object with a weight_map "
                         f"({err})") from None
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise UsageError(f"{path} has weight_map {str(weight_map)[:80]}: expected an object of tensor name -> "
                         "shard file name")
    return sorted(set(weight_map.values()))


class SafetensorsFiles:
    """The tensors of a checkpoint folder: `model.safetensors`, or the shards its index names."""

    def __init__(self, folder: Path) -> None:
        index, single = folder / INDEX, folder / SINGLE
        if index.is_file():
            files = [_inside(folder, name) for name in _index(folder)]
        elif os.path.lexists(single):  # a link is followed only into the folder; a FIFO or device is refused
            files = [_resolved(folder, single)]
        else:
            found = sorted(p.name for p in folder.iterdir())
            raise UsageError(f"{folder} has neither {SINGLE} nor {INDEX} (only safetensors weights are read; "
                             f"convert .bin files with transformers' save_pretrained(safe_serialization=True)); "
                             f"it holds: {', '.join(found) or '(nothing)'}")
        self.where: dict[str, tuple[Path, dict[str, Any], int]] = {}
        for path in files:
            if not path.exists():
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
                with suppress(BufferError):  # a view still alive (held by a traceback) unmaps as it goes
                    m.close()
            self._maps = {}

    def read(self, name: str, use: Callable[[np.ndarray], Any]) -> Any:
        """use(view of tensor `name`): the view is valid only during the call (copy what must outlive it)."""
        path, info, start = self.where[self.find(name)]  # every entry was checked when its header was read
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
