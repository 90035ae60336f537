"""The Kubernetes Pod Security Standards, checked on the pods kuberl renders.

Field lists and allowed values are those of the Pod Security Standards as of
Kubernetes v1.34 (https://kubernetes.io/docs/concepts/security/pod-security-standards/),
read from the pod-security-admission policy package that enforces them
(k8s.io/pod-security-admission/policy/check_*.go), including v1.34's host
probes / lifecycle hooks check and the newer `securityContext.ulimits` check.

Where the admission plugin relaxes a check for user-namespaced pods
(`hostUsers: false`, behind a feature gate) or Windows pods, this module does
not: kuberl runs Linux pods, and a stricter answer here is at worst a refusal
the namespace's own Pod Security Admission would not give.

Pure: `check_pod(pod, level)` reads a Pod dict and returns its violations,
each naming the offending field by path, containers by name
(`spec.containers[trainer].securityContext.privileged`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import safetext

LEVELS = ("privileged", "baseline", "restricted")
DEFAULT_LEVEL = "baseline"

# check_capabilities_baseline.go: the container runtime's default set.
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# check_sysctls.go, the "safe" set as of v1.32 (sysctlsAllowedV1Dot32: v1.29's and net.ipv4.tcp_rmem and
# tcp_wmem, which NCCL-over-TCP jobs tune; without them a pod the namespace's admission lets in was refused here).
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
})
# check_seLinuxOptions.go
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# check_restrictedVolumes.go: inline volume sources the restricted level allows.
RESTRICTED_VOLUME_TYPES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
})
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
DEFAULT_SERVICE_ACCOUNT = "default"


@dataclass(frozen=True)
class Violation:
    """One field a level forbids: where it is, which control, what is allowed."""

    path: str
    control: str
    allowed: str
    got: Any = None

    def __str__(self) -> str:
        return safetext.one_line(f"{self.path}: {self.control}: {self.allowed} (got {self.got!r})")


def _dict(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _one_of(value: Any, allowed: Collection[str]) -> bool:
    """Membership for values a hostile template may give any JSON type (a list
    is unhashable): only a string can be one of the allowed names."""
    return isinstance(value, str) and value in allowed


def _containers(pod_spec: Mapping) -> Iterator[tuple[str, Mapping]]:
    """(path, container) for every container of every kind, named by name."""
    for kind in CONTAINER_LISTS:
        for i, container in enumerate(_list(pod_spec.get(kind))):
            if isinstance(container, Mapping):
                name = container.get("name")
                yield f"spec.{kind}[{name if isinstance(name, str) and name else i}]", container


def _baseline(pod: Mapping) -> Iterator[Violation]:
    meta, spec = _dict(pod.get("metadata")), _dict(pod.get("spec"))
    pod_sc = _dict(spec.get("securityContext"))
    if _dict(pod_sc.get("windowsOptions")).get("hostProcess"):
        yield Violation("spec.securityContext.windowsOptions.hostProcess", "HostProcess", "false or unset", True)
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield Violation(f"spec.{field}", "Host Namespaces", "false or unset", spec[field])
    for i, volume in enumerate(_list(spec.get("volumes"))):
        if isinstance(volume, Mapping) and volume.get("hostPath") is not None:
            yield Violation(f"spec.volumes[{volume.get('name') or i}].hostPath", "HostPath Volumes", "unset", volume["hostPath"])
    for key, value in _dict(meta.get("annotations")).items():
        if str(key).startswith(APPARMOR_ANNOTATION_PREFIX) and value and value != "runtime/default" and not str(value).startswith("localhost/"):
            yield Violation(f"metadata.annotations[{key}]", "AppArmor", "runtime/default, localhost/* or unset", value)
    yield from _apparmor("spec.securityContext", pod_sc)
    yield from _selinux("spec.securityContext", pod_sc)
    yield from _seccomp_baseline("spec.securityContext", pod_sc)
    for i, sysctl in enumerate(_list(pod_sc.get("sysctls"))):
        name = _dict(sysctl).get("name")
        if not _one_of(name, SAFE_SYSCTLS):
            yield Violation(f"spec.securityContext.sysctls[{i}].name", "Sysctls", "one of " + ", ".join(sorted(SAFE_SYSCTLS)), name)
    for path, container in _containers(spec):
        sc = _dict(container.get("securityContext"))
        if _dict(sc.get("windowsOptions")).get("hostProcess"):
            yield Violation(f"{path}.securityContext.windowsOptions.hostProcess", "HostProcess", "false or unset", True)
        if sc.get("privileged"):
            yield Violation(f"{path}.securityContext.privileged", "Privileged Containers", "false or unset", sc["privileged"])
        added = [c for c in _list(_dict(sc.get("capabilities")).get("add")) if not _one_of(c, BASELINE_CAPABILITIES)]
        if added:
            yield Violation(f"{path}.securityContext.capabilities.add", "Capabilities",
                            "only " + ", ".join(sorted(BASELINE_CAPABILITIES)), added)
        for j, port in enumerate(_list(container.get("ports"))):
            if _dict(port).get("hostPort"):
                yield Violation(f"{path}.ports[{j}].hostPort", "Host Ports", "0 or unset", port["hostPort"])
        yield from _apparmor(f"{path}.securityContext", sc)
        yield from _selinux(f"{path}.securityContext", sc)
        if sc.get("procMount") not in (None, "Default"):
            yield Violation(f"{path}.securityContext.procMount", "/proc Mount Type", "Default or unset", sc["procMount"])
        yield from _seccomp_baseline(f"{path}.securityContext", sc)
        if sc.get("ulimits"):
            yield Violation(f"{path}.securityContext.ulimits", "Ulimits", "unset", sc["ulimits"])
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            yield from _handler_host(f"{path}.{probe}", _dict(container.get(probe)))
        for hook in ("postStart", "preStop"):
            yield from _handler_host(f"{path}.lifecycle.{hook}", _dict(_dict(container.get("lifecycle")).get(hook)))


def _apparmor(path: str, sc: Mapping) -> Iterator[Violation]:
    kind = _dict(sc.get("appArmorProfile")).get("type")
    if "appArmorProfile" in sc and kind not in ("RuntimeDefault", "Localhost"):
        yield Violation(f"{path}.appArmorProfile.type", "AppArmor", "RuntimeDefault, Localhost or unset", kind)


def _selinux(path: str, sc: Mapping) -> Iterator[Violation]:
    options = _dict(sc.get("seLinuxOptions"))
    if options.get("type") is not None and not _one_of(options["type"], SELINUX_TYPES):
        yield Violation(f"{path}.seLinuxOptions.type", "SELinux", "one of " + ", ".join(sorted(t for t in SELINUX_TYPES if t)) + " or unset", options["type"])
    for field in ("user", "role"):
        if options.get(field):
            yield Violation(f"{path}.seLinuxOptions.{field}", "SELinux", "unset", options[field])


def _seccomp_baseline(path: str, sc: Mapping) -> Iterator[Violation]:
    if _dict(sc.get("seccompProfile")).get("type") == "Unconfined":
        yield Violation(f"{path}.seccompProfile.type", "Seccomp", "RuntimeDefault, Localhost or unset", "Unconfined")


def _handler_host(path: str, handler: Mapping) -> Iterator[Violation]:
    for action in ("httpGet", "tcpSocket"):
        host = _dict(handler.get(action)).get("host")
        if host:
            yield Violation(f"{path}.{action}.host", "Host Probes / Lifecycle Hooks", "empty or unset", host)


def _restricted(pod: Mapping) -> Iterator[Violation]:
    spec = _dict(pod.get("spec"))
    pod_sc = _dict(spec.get("securityContext"))
    for i, volume in enumerate(_list(spec.get("volumes"))):
        if not isinstance(volume, Mapping):
            continue
        sources = [k for k in volume if k != "name"]
        for source in sources:
            if source not in RESTRICTED_VOLUME_TYPES and source != "hostPath":  # hostPath: already a baseline violation
                yield Violation(f"spec.volumes[{volume.get('name') or i}].{source}", "Volume Types",
                                "only " + ", ".join(sorted(RESTRICTED_VOLUME_TYPES)), volume[source])
    if pod_sc.get("runAsNonRoot") is False:
        yield Violation("spec.securityContext.runAsNonRoot", "Running as Non-root", "true", False)
    if pod_sc.get("runAsUser") == 0:
        yield Violation("spec.securityContext.runAsUser", "Running as Non-root user", "a non-zero UID or unset", 0)
    pod_seccomp = _dict(pod_sc.get("seccompProfile")).get("type")
    if "seccompProfile" in pod_sc and pod_seccomp not in ("RuntimeDefault", "Localhost") and pod_seccomp != "Unconfined":
        yield Violation("spec.securityContext.seccompProfile.type", "Seccomp", "RuntimeDefault or Localhost", pod_seccomp)
    for path, container in _containers(spec):
        sc = _dict(container.get("securityContext"))
        if sc.get("allowPrivilegeEscalation") is not False:
            yield Violation(f"{path}.securityContext.allowPrivilegeEscalation", "Privilege Escalation", "false", sc.get("allowPrivilegeEscalation"))
        if sc.get("runAsNonRoot") is False or (sc.get("runAsNonRoot") is None and pod_sc.get("runAsNonRoot") is not True):
            yield Violation(f"{path}.securityContext.runAsNonRoot", "Running as Non-root",
                            "true (here or in spec.securityContext)", sc.get("runAsNonRoot"))
        if sc.get("runAsUser") == 0:
            yield Violation(f"{path}.securityContext.runAsUser", "Running as Non-root user", "a non-zero UID or unset", 0)
        seccomp = _dict(sc.get("seccompProfile")).get("type")
        if seccomp is None and pod_seccomp not in ("RuntimeDefault", "Localhost") or seccomp not in (None, "RuntimeDefault", "Localhost", "Unconfined"):
            yield Violation(f"{path}.securityContext.seccompProfile.type", "Seccomp",
                            "RuntimeDefault or Localhost (here or in spec.securityContext)", seccomp)
        capabilities = _dict(sc.get("capabilities"))
        if "ALL" not in _list(capabilities.get("drop")):
            yield Violation(f"{path}.securityContext.capabilities.drop", "Capabilities", "must include ALL", capabilities.get("drop"))
        # additions outside the default set are already a baseline violation
        added = [c for c in _list(capabilities.get("add")) if _one_of(c, BASELINE_CAPABILITIES - RESTRICTED_CAPABILITIES)]
        if added:
            yield Violation(f"{path}.securityContext.capabilities.add", "Capabilities", "only NET_BIND_SERVICE", added)


def check_pod(pod: Mapping, level: str) -> list[Violation]:
    """Every field of `pod` the Pod Security Standards level forbids."""
    if level not in LEVELS:
        raise ValueError(f"unknown pod security level {level!r}: expected one of {', '.join(LEVELS)}")
    if level == "privileged":
        return []
    violations = list(_baseline(pod))
    if level == "restricted":
        violations += _restricted(pod)
    return violations


def check_service_account(pod: Mapping, allowed: Collection[str] | None) -> list[Violation]:
    """The pod's service account against an allowlist (None: any is allowed).
    Pod Security Standards leave serviceAccountName open; a platform may not."""
    if allowed is None:
        return []
    spec = _dict(pod.get("spec"))
    # The API server reads the deprecated `serviceAccount` when `serviceAccountName`
    # is empty (pkg/apis/core/v1/conversion.go), so both name the pod's account.
    given = {field: spec[field] for field in ("serviceAccountName", "serviceAccount") if spec.get(field)}
    expected = "one of " + ", ".join(sorted(allowed))
    if not given:
        return [] if DEFAULT_SERVICE_ACCOUNT in allowed else [
            Violation("spec.serviceAccountName", "Service Account", expected, DEFAULT_SERVICE_ACCOUNT)]
    return [Violation(f"spec.{field}", "Service Account", expected, name)
            for field, name in given.items() if not _one_of(name, allowed)]


# Fields every Pod Security level leaves open, each a way out of a namespace's share of the cluster;
# an operator may refuse any of them (--forbid-pod-fields, chart value forbidPodFields).
OPEN_FIELDS = {
    "nodeName": "spec.nodeName skips the scheduler, and with it NoSchedule taints and node affinity",
    "tolerations": "a toleration with no key and operator Exists tolerates every taint (dedicated, GPU and control-plane nodes)",
    "priorityClassName": "a high PriorityClass preempts other tenants' pods",
    "schedulerName": "another scheduler places the pod by its own rules",
    "serviceAccountToken": "a projected service-account token may name any audience: a credential for another system",
    "csi": "an inline CSI volume is whatever the cluster's drivers make of its attributes",
    "nfs": "an NFS volume mounts any server's export the node can reach",
}
DEFAULT_SCHEDULER = "default-scheduler"


def check_open_fields(pod: Mapping, forbidden: Collection[str]) -> list[Violation]:
    """The fields of `pod` among OPEN_FIELDS that the operator was told to refuse."""
    spec = _dict(pod.get("spec"))
    found = []
    if "nodeName" in forbidden and spec.get("nodeName"):
        found.append(Violation("spec.nodeName", "Node Name", "unset (the scheduler places the pod)", spec["nodeName"]))
    if "tolerations" in forbidden:
        found += [Violation(f"spec.tolerations[{i}]", "Tolerations", "a key (no key with operator Exists tolerates every taint)", t)
                  for i, t in enumerate(_list(spec.get("tolerations"))) if _dict(t).get("operator") == "Exists" and not _dict(t).get("key")]
    if "priorityClassName" in forbidden and spec.get("priorityClassName"):
        found.append(Violation("spec.priorityClassName", "Priority Class", "unset", spec["priorityClassName"]))
    if "schedulerName" in forbidden and spec.get("schedulerName") not in (None, "", DEFAULT_SCHEDULER):
        found.append(Violation("spec.schedulerName", "Scheduler", f"unset or {DEFAULT_SCHEDULER}", spec["schedulerName"]))
    for i, volume in enumerate(_list(spec.get("volumes"))):
        volume = _dict(volume)
        where = f"spec.volumes[{volume.get('name') or i}]"
        for kind in ("csi", "nfs"):
            if kind in forbidden and volume.get(kind) is not None:
                found.append(Violation(f"{where}.{kind}", f"{kind.upper()} Volumes", "unset", volume[kind]))
        if "serviceAccountToken" in forbidden:
            found += [Violation(f"{where}.projected.sources[{j}].serviceAccountToken", "Service Account Tokens", "no projected token",
                                _dict(source).get("serviceAccountToken"))
                      for j, source in enumerate(_list(_dict(volume.get("projected")).get("sources")))
                      if _dict(source).get("serviceAccountToken") is not None]
    return found


def parse_open_fields(text: str | None) -> frozenset[str]:
    """`--forbid-pod-fields nodeName,csi`: the OPEN_FIELDS to refuse (none when unset)."""
    chosen = frozenset(n.strip() for n in (text or "").split(",") if n.strip())
    unknown = sorted(chosen - OPEN_FIELDS.keys())
    if unknown:
        raise ValueError(f"unknown pod field {unknown[0]!r}: expected some of {', '.join(OPEN_FIELDS)}")
    return chosen


def check_pods(pods: Iterable[Mapping], level: str, allowed_service_accounts: Collection[str] | None = None,
               forbidden: Collection[str] = ()) -> list[Violation]:
    """Violations of several pods (a gang), each reported once: the pods of a
    job differ only in rank, so a template's violation would repeat per pod."""
    seen: dict[tuple[str, str], Violation] = {}
    for pod in pods:
        for v in check_pod(pod, level) + check_service_account(pod, allowed_service_accounts) + check_open_fields(pod, forbidden):
            seen.setdefault((v.path, v.control), v)
    return list(seen.values())


def parse_service_accounts(text: str | None) -> frozenset[str] | None:
    """`--allowed-service-accounts a,b`: None (any) when unset or empty."""
    names = frozenset(n.strip() for n in (text or "").split(",") if n.strip())
    return names or None
