"""Names of things on the Hugging Face Hub: a repo id (`org/name[@revision]`) and `hf://` addresses."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import UsageError

__all__ = ["HF", "Address", "is_hub_address", "parse_address", "split_revision"]

HF = "hf://"
PART = r"[\w.-]+"
REPO_ID = re.compile(rf"^{PART}/{PART}$")
SUBFOLDER = re.compile(rf"^{PART}(/{PART})*$")
FORMS = {"model": "hf://ORG/REPO[/SUBFOLDER][@REVISION]", "dataset": "hf://datasets/ORG/NAME[/CONFIG][@REVISION]"}


@dataclass(frozen=True)
class Address:
    """A repo (`org/name`) of a kind (model or dataset), a revision (None: main) and a path inside it."""

    repo: str
    kind: str = "model"
    revision: str | None = None
    subfolder: str = ""

    def __str__(self) -> str:
        """The address as typed: hf://[datasets/]ORG/REPO[/SUBFOLDER][@REVISION]."""
        kind = "datasets/" if self.kind == "dataset" else ""
        sub = f"/{self.subfolder}" if self.subfolder else ""
        rev = f"@{self.revision}" if self.revision else ""
        return f"{HF}{kind}{self.repo}{sub}{rev}"


def is_hub_address(value: object) -> bool:
    """Whether `value` is a string starting with hf://."""
    return isinstance(value, str) and value.startswith(HF)


def split_revision(text: str) -> tuple[str, str | None]:
    """(name, revision) of `name@revision` (revision None when no @ is given)."""
    name, at, revision = text.partition("@")
    if at and not revision:
        raise UsageError(f"{text!r} ends with '@' but names no revision; expected NAME@REVISION, e.g. {name}@main")
    return name, (revision or None)


def parse_address(text: str, kind: str = "model") -> Address:
    """The Address of `hf://ORG/REPO[/SUBFOLDER][@REVISION]` (kind model) or `hf://datasets/ORG/NAME[...]`."""
    if not is_hub_address(text):
        raise UsageError(f"{text!r} is not a hub address; expected {FORMS[kind]}")
    body, revision = split_revision(text[len(HF):])
    if kind == "dataset":
        if not body.startswith("datasets/"):
            raise UsageError(f"{text!r}: a corpus on the hub is {FORMS['dataset']} (datasets/ first)")
        body = body[len("datasets/"):]
    parts = body.strip("/").split("/")
    repo, sub = "/".join(parts[:2]), "/".join(parts[2:])
    if len(parts) < 2 or not REPO_ID.match(repo) or (sub and not SUBFOLDER.match(sub)) or ".." in parts:
        raise UsageError(f"{text!r} is not a hub address; expected {FORMS[kind]}, e.g. "
                         + ("hf://datasets/acme/corpus" if kind == "dataset" else
                            "hf://jbloom/GPT2-Small-SAEs-Reformatted/blocks.0.hook_resid_pre"))
    return Address(repo, kind, revision, sub)
