"""The operator's own Prometheus metrics, on their own registry (names in kuberl.core.metricnames).

Jobs by phase is computed at scrape time from what the reconciles last saw,
so a deleted job stops counting the moment it is forgotten.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..core import contract, lifecycle
from ..core import metricnames as m

PHASES = (lifecycle.PENDING, lifecycle.RUNNING, lifecycle.RESTARTING, lifecycle.SUSPENDED, lifecycle.SUCCEEDED, lifecycle.FAILED)
# Rank 0's metrics pages the operator refused to read, by reason (kuberl.core.rank0metrics.MAX_PAGE_BYTES).
METRICS_PAGES_REFUSED_TOTAL = f"{m.OPERATOR_PREFIX}_metrics_pages_refused_total"
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _JobsByPhase(Collector):
    def __init__(self, phases: dict[tuple[str, str], str], restarts: dict[tuple[str, str], int]):
        self.phases, self.restarts = phases, restarts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(m.OPERATOR_JOBS, "RLTrainingJobs by phase, as last reconciled.", labels=[m.LABEL_PHASE])
        phases = dict(self.phases)  # one copy (atomic in CPython): reconciles change it from another thread
        counts = dict.fromkeys(PHASES, 0)
        for phase in phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, count in counts.items():
            family.add_metric([phase], count)
        yield family
        per_job = GaugeMetricFamily(m.OPERATOR_JOB_PHASE, "1 for each RLTrainingJob, labelled with its phase as last reconciled.",
                                    labels=[m.LABEL_NAMESPACE, m.LABEL_RLTJ, m.LABEL_PHASE])
        for (namespace, name), phase in sorted(phases.items()):
            per_job.add_metric([namespace, name, phase], 1)
        yield per_job
        restarts = GaugeMetricFamily(m.OPERATOR_JOB_RESTARTS, "Gang restarts of each RLTrainingJob counted toward its"
                                     " runPolicy.backoffLimit (crashes, stalls), from its status.", labels=[m.LABEL_NAMESPACE, m.LABEL_RLTJ])
        for (namespace, name), count in sorted(dict(self.restarts).items()):
            restarts.add_metric([namespace, name], count)
        yield restarts


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.phases: dict[tuple[str, str], str] = {}
        self.restarts: dict[tuple[str, str], int] = {}
        self.registry.register(_JobsByPhase(self.phases, self.restarts))
        ProcessCollector(registry=self.registry)  # start time (restarts), memory, CPU, fds of the operator itself
        self.reconcile_duration = Histogram(
            m.OPERATOR_RECONCILE_DURATION, "Time of one reconcile of one job (reads, decision, writes).",
            registry=self.registry, buckets=RECONCILE_BUCKETS,
        )
        self.spec_judgement = Histogram(
            m.OPERATOR_SPEC_JUDGEMENT, "CPU seconds of one judgement of a job's spec generation (validation, its pods"
            " rendered and checked against the pod security level).", registry=self.registry, buckets=RECONCILE_BUCKETS,
        )
        # Per job (namespace, rltj: the dashboard's filters), dropped when the job is gone (job_phase(..., None)).
        self.gang_restarts = Counter(m.OPERATOR_GANG_RESTARTS_TOTAL, "Gang restarts started, by job and reason.",
                                     [m.LABEL_NAMESPACE, m.LABEL_RLTJ, m.LABEL_REASON], registry=self.registry)
        self.pods_created = Counter(m.OPERATOR_PODS_CREATED_TOTAL, "Worker pods created, by job.", [m.LABEL_NAMESPACE, m.LABEL_RLTJ],
                                    registry=self.registry)
        self.restart_reasons: dict[tuple[str, str], set[str]] = {}
        self.peers_same_priority = Gauge(
            m.OPERATOR_PEERS_SAME_PRIORITY, "Other live replicas in this one's peering object with its priority: kopf pauses"
            " every one of them, so no job progresses while this is above 0.", registry=self.registry,
        )
        self.namespace_refused = Gauge(
            m.OPERATOR_NAMESPACE_REFUSED, "1 for a watched namespace where RBAC refuses the operator its list or watch: its"
            " jobs are not reconciled (the other namespaces are) until the permission is granted; 0 while it is served.",
            [m.LABEL_NAMESPACE], registry=self.registry,
        )
        self.api_errors = Counter(
            m.OPERATOR_API_ERRORS_TOTAL, "Kubernetes API requests that failed, by verb, resource and HTTP status"
            " (404 and 409, which the operator resolves itself, are counted apart).",
            ["verb", "resource", "code"], registry=self.registry,
        )
        self.api_resolved = Counter(
            m.OPERATOR_API_RESOLVED_TOTAL, "Kubernetes API requests answered 404, 409 or 410 where the operator resolves the answer itself"
            " (an object already gone, a name already taken, a write on a stale version, a paged list whose revision"
            " was compacted: listed again), and the 403 a refused"
            " namespace's recheck expects (kuberl_operator_namespace_refused counts that refusal): not errors.",
            ["verb", "resource", "code"], registry=self.registry,
        )
        self.api_throttled = Counter(
            m.OPERATOR_API_THROTTLED_SECONDS_TOTAL, "Seconds the operator's own API requests waited for its request budget"
            " (--kube-api-qps, --kube-api-burst); rising steadily: the budget, not the API server, sets the pace.",
            registry=self.registry,
        )

        self.metrics_pages_refused = Counter(
            METRICS_PAGES_REFUSED_TOTAL, "Rank 0 metrics pages not read (too_large: over the size limit).",
            [m.LABEL_REASON], registry=self.registry,
        )

    def job_phase(self, namespace: str, name: str, phase: str | None, restarts: int = 0) -> None:
        """The job's phase and counted restarts (status.restarts) as last reconciled; None: the job is gone,
        and its per-job series with it (so the series a cluster's jobs leave behind stay bounded by the jobs that exist)."""
        if phase is not None:
            self.phases[(namespace, name)] = phase
            self.restarts[(namespace, name)] = restarts
            # Restarts no budget counts (a failing checkpoint volume) start from a 0 Prometheus has seen, so the
            # alert on them (increase() over an hour) sees the first one too: a series born at 1 hides it.
            for reason in contract.UNCOUNTED_REASONS - self.restart_reasons.get((namespace, name), set()):
                self.restart_reasons.setdefault((namespace, name), set()).add(reason)
                self.gang_restarts.labels(namespace, name, reason)
            return
        self.phases.pop((namespace, name), None)
        self.restarts.pop((namespace, name), None)
        for reason in self.restart_reasons.pop((namespace, name), set()):
            with contextlib.suppress(KeyError):
                self.gang_restarts.remove(namespace, name, reason)
        with contextlib.suppress(KeyError):
            self.pods_created.remove(namespace, name)

    def forget_namespace(self, namespace: str) -> None:
        """Every per-job series of a namespace the operator no longer sees (RBAC refuses it its watch there)."""
        for job_namespace, name in list(self.phases):
            if job_namespace == namespace:
                self.job_phase(job_namespace, name, None)

    def gang_restarted(self, namespace: str, name: str, reason: str) -> None:
        self.restart_reasons.setdefault((namespace, name), set()).add(reason)
        self.gang_restarts.labels(namespace, name, reason).inc()

    def pod_created(self, namespace: str, name: str) -> None:
        self.pods_created.labels(namespace, name).inc()

    def serve(self, addr: str, port: int) -> None:
        start_http_server(port, addr=addr, registry=self.registry)
