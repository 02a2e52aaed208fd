"""Where outputs live: the data store and its cache keys and code versions, a home on an object store and its local cache, the home's remembered settings, and the process environment."""
