"""The operator's own Prometheus metrics, on their own registry (names in kuberl.metricnames).

Jobs by phase is computed at scrape time from what the reconciles last saw,
so a deleted job stops counting the moment it is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from . import lifecycle
from . import metricnames as m

PHASES = (lifecycle.PENDING, lifecycle.RUNNING, lifecycle.RESTARTING, lifecycle.SUSPENDED, lifecycle.SUCCEEDED, lifecycle.FAILED)
# Rank 0's metrics pages the operator refused to read, by reason (kuberl.rank0metrics.MAX_PAGE_BYTES).
METRICS_PAGES_REFUSED_TOTAL = f"{m.OPERATOR_PREFIX}_metrics_pages_refused_total"
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _JobsByPhase(Collector):
    def __init__(self, phases: dict[tuple[str, str], str]):
        self.phases = phases

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(m.OPERATOR_JOBS, "RLTrainingJobs by phase, as last reconciled.", labels=[m.LABEL_PHASE])
        counts = dict.fromkeys(PHASES, 0)
        for phase in self.phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, count in counts.items():
            family.add_metric([phase], count)
        yield family


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.phases: dict[tuple[str, str], str] = {}
        self.registry.register(_JobsByPhase(self.phases))
        self.reconcile_duration = Histogram(
            m.OPERATOR_RECONCILE_DURATION, "Time of one reconcile of one job (reads, decision, writes).",
            registry=self.registry, buckets=RECONCILE_BUCKETS,
        )
        self.gang_restarts = Counter(m.OPERATOR_GANG_RESTARTS_TOTAL, "Gang restarts started, by reason.", [m.LABEL_REASON], registry=self.registry)
        self.pods_created = Counter(m.OPERATOR_PODS_CREATED_TOTAL, "Worker pods created.", registry=self.registry)
        self.api_errors = Counter(
            m.OPERATOR_API_ERRORS_TOTAL, "Kubernetes API requests that failed, by verb, resource and HTTP status.",
            ["verb", "resource", "code"], registry=self.registry,
        )

        self.metrics_pages_refused = Counter(
            METRICS_PAGES_REFUSED_TOTAL, "Rank 0 metrics pages not read (too_large: over the size limit).",
            [m.LABEL_REASON], registry=self.registry,
        )

    def job_phase(self, namespace: str, name: str, phase: str | None) -> None:
        if phase is None:
            self.phases.pop((namespace, name), None)
        else:
            self.phases[(namespace, name)] = phase

    def serve(self, addr: str, port: int) -> None:
        start_http_server(port, addr=addr, registry=self.registry)
