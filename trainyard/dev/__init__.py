"""Top floor, the developer's tools: they read trainyard's own source (its imports, its tests), not
the GitOps repository it manages. ``imports`` is the one reader of imports that the floors test and
the test map (``testmap``, ``trainyard dev tests``) share."""
