"""Test support: a Kubernetes API stand-in strict where the real API server is strict, and a local node.

Fixtures (tests/support/fixtures.py; the stand-in's own tests, test_standin_*.py, live beside it here and
the operator tier uses the same ones): `standin` (server with manifests/crd.yaml applied), `rest` (a
status-code-exact client), `kube_api` (kubernetes.client.ApiClient), `local_node`.

- `apiserver.StandinServer`: the API server on 127.0.0.1 over real HTTP, in a background thread.
  kmock 0.8 serves the socket and parses requests; its reaction DSL still works for fault injection
  (``standin.handler['patch', kmock.resource('', 'v1', 'pods')] << 503``); `handler.shed[(verb, resource)] = N`
  answers the next N such requests, writes included, 429 as API Priority and Fairness sheds them. `url`, `kubeconfig`,
  `store`, `calls` (Counter of `ApiCall(verb, group, resource, namespace, subresource, agent)`),
  `writes(agent=None)`, `apply_crd(path_or_doc)`.
- `store.Store`: the write rules. 201 with uid/resourceVersion/generation; 409 on stale
  resourceVersion and on an existing (even terminating) name; /status isolation; generation on spec
  change only; no-op writes change nothing; merge, JSON and strategic-merge patches; graceful pod
  deletion (a pod on a registered Ready node waits for that node's confirmation; with no Node object a
  stand-in kubelet confirms at once; on a NotReady node it stays until force-deleted); finalizers;
  owner-reference garbage collection (background, foreground, orphan); namespaces; eviction; claims' own rules (an
  access mode, a storage request above zero, no shrink below status.capacity); core/v1 Events' (legacyValidateEvent:
  a message of at most 1024 bytes where an eventTime is set); a CRD's deletion
  (Terminating, its instances deleted through their finalizers, creates refused, then its watches ended).
  Hooks: `store.hooks.unschedulable` / `image_pull_failure` (label selectors), `store.hooks.admission`
  (refusals on create with a real API server's codes and messages: `admission.Refuse`), `store.hooks.conflicts`
  (`[(plural, namespace, name)] = N`: its next N writes carrying a resourceVersion meet a stale one's 409), `store.reschedule()`,
  `store.evict(ns, name)`, `store.report_pod(ns, name, status)` with `container_terminated(...)`.
- `crdschema`: a CRD's structural schema (types, nullable, defaults, pruning, fieldValidation) and
  its x-kubernetes-validations via cel-python, with oldSelf on update.
- `coreschema`: built-in kinds decoded against Kubernetes' own schemas (from kubernetes-validate), quantities as
  resource.ParseQuantity reads them (its refusals a 400, as Quantity.UnmarshalJSON's error) and stored as
  Quantity.MarshalJSON writes them (1000m: 1, 1.5Gi: 1536Mi); custom resources' stay as written.
- `tables`, `openapi`: server-side Table rendering and the OpenAPI v3 kubectl needs.
- `localnode.LocalNode`: a kubelet stand-in running bound pods as local processes (kuberl.local.process).
- `python -m tests.support --crd manifests/crd.yaml --node`: the same, by hand.
"""
