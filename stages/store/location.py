"""Where the Yunque home is: `$YUNQUE_HOME`, a local directory or an object store URL, and
the local cache of a remote one."""

from __future__ import annotations

import os
from pathlib import Path


def home_url() -> str:
    """$YUNQUE_HOME as given: an object store URL (s3://bucket/prefix, any fsspec URL) or
    a local directory, made absolute."""
    return spelled(os.environ.get("YUNQUE_HOME", ".yunque"))


def spelled(raw: str) -> str:
    """A home as `home_url` spells it: a URL without its trailing slash, or an absolute
    directory (one home, one spelling)."""
    if "://" in raw and not raw.startswith("file://"):
        return raw.rstrip("/")
    return str(Path(raw.removeprefix("file://")).absolute())


def home() -> Path:
    """The local root of the home: the home itself, or the local cache of a remote one."""
    url = home_url()
    return local_root(url) if "://" in url else Path(url)


def local_root(url: str) -> Path:
    """The local cache of a remote home (the same path for every process of a machine)."""
    if os.environ.get("YUNQUE_CACHE"):
        return Path(os.environ["YUNQUE_CACHE"]).absolute()
    scheme, rest = url.split("://", 1)
    return Path.home() / ".cache" / "yunque" / scheme / rest.strip("/")

