"""The Kubernetes shim: Kubernetes objects onto Sniper's feed, and Sniper's decisions back onto the API server.

``objects`` (quantities, node capacity and schedulability, pod requests and roles), ``mapping`` (pods to
apps and asks, gangs, PriorityClass and PodDisruptionBudget flags, what Sniper cannot express) and
``placement`` (YuniKorn's placement rules to a queue) are pure translation on the plain JSON dicts the
API server serves: no I/O, no clock, deterministic. The process around them is ``sniper k8s``.
"""
