"""Where outputs live: the data store and its cache keys and code versions, a home on an object store and its local cache, where the home is, and the home's remembered settings."""
