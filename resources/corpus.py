"""The corpus location: a local folder or an `s3://bucket/prefix`, read through fsspec."""

from __future__ import annotations

import os
from typing import Any

import dagster as dg

from pipelines.data.corpus import ShardInfo, get_shard, list_shards, open_corpus, shard_key
from stages.store.location import home


def default_corpus() -> str:
    return os.environ.get("YUNQUE_CORPUS", str(home() / "sample"))


class CorpusStorage(dg.ConfigurableResource):
    """Where the raw shards live. For S3-compatible stores set `endpoint_url`
    (credentials come from the usual AWS environment variables)."""

    uri: str
    endpoint_url: str | None = None
    anon: bool = False

    def storage_options(self) -> dict[str, Any]:
        if not self.uri.startswith("s3://"):
            return {}
        opts: dict[str, Any] = {"anon": self.anon}
        if self.endpoint_url:
            opts["client_kwargs"] = {"endpoint_url": self.endpoint_url}
        return opts

    def open(self):  # -> tuple[fsspec.AbstractFileSystem, str]
        return open_corpus(self.uri, self.storage_options())

    def shards(self) -> list[ShardInfo]:
        fs, root = self.open()
        return list_shards(fs, root)

    def shard(self, key: str) -> ShardInfo:
        """The shard of partition `key`, as `shards()` lists it. A plain name is its own key,
        so only that shard is listed (a batch of 32 shards listing the whole corpus once
        each is quadratic in the corpus); a sanitised key is looked up in the full listing."""
        fs, root = self.open()
        if shard_key(key) == key and not key.startswith("_"):
            found = get_shard(fs, root, key)
            if found.files:
                return found
        for s in list_shards(fs, root):
            if s.key == key:
                return s
        raise dg.Failure(f"shard {key!r} is registered but no longer found under {self.uri}")
