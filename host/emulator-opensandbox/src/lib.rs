//! A wire-compatible OpenSandbox server and execd with production failure modes, for tests and laptops (sandfleet devcluster opensandbox).
