"""Hugging Face model ids as starting checkpoints: `model.path = "Qwen/Qwen3-30B-A3B"`.

An id is resolved through huggingface_hub's cache (HF_HOME / HF_HUB_CACHE): a
snapshot already there is used as it is, otherwise the files a causal LM needs are
downloaded into the cache once. With HF_HUB_OFFLINE=1 only the cache is read, and a
model that is not cached is an error naming the id. Local directories and s3://
URIs are not ids and pass through unchanged.
"""

from __future__ import annotations

import os
import re

# "org/name" as the Hub spells repository ids; a path that exists on disk wins.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
# What serving and training read: config, weights, tokenizer (no other formats' weights).
_MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.py"]


def is_hub_id(path: str) -> bool:
    """True for 'org/name' strings that are not an existing path or a URL."""
    return "://" not in path and not os.path.exists(path) and bool(_HUB_ID.match(path))


def resolve_model(path: str) -> str:
    """A local directory (or s3:// URI) for `path`; Hub ids become their cached snapshot."""
    if not is_hub_id(path):
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return snapshot_download(repo_id=path, allow_patterns=_MODEL_FILES)
    except LocalEntryNotFoundError as exc:
        raise FileNotFoundError(
            f"model.path {path!r}: not in the Hugging Face cache and the Hub cannot be reached ({exc}); "
            "download it once with network access, or give a local model directory"
        ) from None
    except HfHubHTTPError as exc:
        raise FileNotFoundError(
            f"model.path {path!r}: the Hub refused it ({exc}); check the id and your HF_TOKEN"
        ) from None


def template_folder(path: str) -> str:
    """A local folder holding the chat template files of `path` (a directory, or a Hub id
    whose tokenizer_config.json and chat_template.jinja are fetched into the cache: a few
    kB, before any weights)."""
    if not is_hub_id(path):
        return path
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

    folder, uncached = None, None
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        try:
            folder = os.path.dirname(hf_hub_download(repo_id=path, filename=name))
        except LocalEntryNotFoundError as exc:  # a subclass of EntryNotFoundError: caught first
            uncached = exc
        except EntryNotFoundError:
            continue  # a model may ship only one of them
        except HfHubHTTPError as exc:
            raise FileNotFoundError(
                f"model.path {path!r}: the Hub refused its chat template ({exc}); check the id and your HF_TOKEN, "
                "or set inference.tool_format ('text' or the family's format)"
            ) from None
    if folder is None and uncached is not None:
        raise FileNotFoundError(
            f"model.path {path!r}: its chat template is not in the Hugging Face cache and the Hub cannot be "
            f"reached ({uncached}); set inference.tool_format ('text' or the family's format), or download the model once"
        )
    if folder is None:
        raise FileNotFoundError(f"model.path {path!r}: no tokenizer_config.json or chat_template.jinja on the Hub")
    return folder
