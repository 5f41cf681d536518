//! sandfleet's OpenSandbox driver: lifecycle API and execd over the hardened transport.
