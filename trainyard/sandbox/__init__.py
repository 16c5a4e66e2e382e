"""Floor 3, the local sandbox of ``trainyard demo``: pods as process groups in network namespaces,
the webhook as a local process, process-tree helpers. Shipped in neither image."""
