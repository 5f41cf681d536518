//! A wire-compatible Kubernetes API server with agent-sandbox's controllers, for tests and laptops (sandfleet devcluster k8s).
