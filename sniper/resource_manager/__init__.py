"""The resource manager's side of a live cluster: ``sniper feed`` plays a trace onto the feed topic and
answers the decisions as a resource manager would, ``sniper record`` keeps a live feed as a trace
(:mod:`sniper.resource_manager.feed`), and the ordered checker reads both topics and checks the invariants on
the order the caches committed (:mod:`sniper.resource_manager.checker`). None of it is decision logic."""
