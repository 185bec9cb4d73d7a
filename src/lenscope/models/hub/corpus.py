"""A corpus on the hub (`hf://datasets/ORG/NAME[/CONFIG][@REVISION]`), streamed record by record through `datasets`.

Nothing is downloaded whole: `datasets` streams the repo's files (Parquet row groups, JSON lines) and this module
yields one text at a time, so what is held while reading is one batch of records, not the corpus. `datasets`
reads HF_ENDPOINT and HF_HUB_OFFLINE when it is imported, so set them before the process starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...errors import UsageError
from .address import Address, parse_address
from .failures import explain
from .settings import settings

__all__ = ["stream_texts"]


@contextlib.contextmanager
def _online(config: Any) -> Iterator[None]:
    """`datasets` allowed on the network while a named corpus is opened: lenscope's tables set
    HF_DATASETS_OFFLINE=1 for themselves (analysis/table_schema.py), and a corpus named hf://datasets/... is a
    request for the hub; HF_HUB_OFFLINE, the user's switch, was checked before."""
    saved = config.HF_HUB_OFFLINE, config.HF_DATASETS_OFFLINE
    config.HF_HUB_OFFLINE = config.HF_DATASETS_OFFLINE = False
    try:
        yield
    finally:
        config.HF_HUB_OFFLINE, config.HF_DATASETS_OFFLINE = saved


def _dataset(address: Address, split: str) -> Any:
    """The streaming split of `address`; a UsageError naming the repo, the split and what to do."""
    hub = settings()
    if hub.offline:
        raise UsageError(f"data/text={address}: a corpus on the hub is streamed, and HF_HUB_OFFLINE is set: unset it, "
                         "or download the files (`hf download "
                         f"{address.repo} --repo-type dataset --local-dir DIR`) and give data/text=DIR")
    import datasets  # lazy: only a corpus on the hub needs it, and it is slow to import

    try:
        with _online(datasets.config):
            return datasets.load_dataset(address.repo, address.subfolder or None, split=split, streaming=True,
                                         revision=address.revision)
    except ValueError as err:  # an unknown split or config: datasets names the ones there are
        raise UsageError(f"data/text={address}: {str(err).splitlines()[0][:300]} (data/split chooses the split; "
                         "the config is the part after the dataset's name)") from None
    except Exception as err:  # huggingface_hub's HTTP errors and the network's
        raise explain(address, err, hub) from None


def stream_texts(text: str, split: str = "train", key: str = "text", limit: int = 0) -> Iterator[str]:
    """The texts of column `key` of `split` of the hub corpus `text`, in order; at most `limit` (0: all)."""
    address = parse_address(text, "dataset")
    data = _dataset(address, split)
    columns = list(getattr(data, "column_names", None) or [])
    if columns and key not in columns:
        raise UsageError(f"data/text={text}: split {split!r} has no column {key!r} (data/text_key); columns: "
                         f"{', '.join(columns)}")
    hub = settings()
    count = 0
    try:
        for record in data.select_columns([key]) if columns else data:
            value = record.get(key)
            if not isinstance(value, str):
                raise UsageError(f"data/text={text}: record {count} of split {split!r} has no string {key!r} "
                                 f"(data/text_key); it has {', '.join(record) or 'no fields'}")
            yield value
            count += 1
            if limit and count >= limit:
                return
    except UsageError:
        raise
    except Exception as err:  # a file cut off or refused while streaming
        raise explain(address, err, hub) from None
