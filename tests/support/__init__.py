"""Test support: a Kubernetes API stand-in strict where the real API server is strict, and a local node.

- `apiserver.StandinServer`: the API server over real HTTP (kmock underneath), with `store` for hooks
  and `calls` for the API call log.
- `store.Store`: the write rules (409s, graceful deletion, finalizers, garbage collection, status).
- `crdschema`: CRD structural schema, defaults, pruning and CEL rules, read from the CRD YAML.
"""
