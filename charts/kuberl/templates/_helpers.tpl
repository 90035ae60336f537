{{/* Names, labels and the checks no JSON schema can express. */}}

{{- define "kuberl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kuberl.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Grafana dashboard's uid: two releases (another namespace, another name) sharing a Grafana must not
overwrite each other's dashboard, and an upgrade keeps its links; Grafana refuses a uid over 40 characters. */}}
{{- define "kuberl.dashboardUid" -}}
{{- printf "kuberl-%s" (printf "%s/%s" .Release.Namespace .Release.Name | sha256sum | trunc 20) -}}
{{- end -}}

{{/* The dashboard's ConfigMap: named after the release, and after its namespace too where it is written into
another one (Grafana's), so two releases of one name in two namespaces do not claim the same object. */}}
{{- define "kuberl.dashboardConfigMap" -}}
{{- $namespace := default .Release.Namespace .Values.monitoring.dashboard.namespace -}}
{{- if eq $namespace .Release.Namespace -}}
{{- printf "%s-dashboard" (include "kuberl.fullname" .) -}}
{{- else -}}
{{- printf "%s.%s-dashboard" .Release.Namespace (include "kuberl.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The dashboard's title: Grafana lists dashboards by title, so two releases' are told apart. */}}
{{- define "kuberl.dashboardTitle" -}}
{{- printf "kuberl (%s/%s)" .Release.Namespace .Release.Name -}}
{{- end -}}

{{/* The dashboard's key in that ConfigMap, which Grafana's sidecar (k8s-sidecar) takes as the file name in one folder
for every namespace it reads: unique per release, or two releases' dashboards overwrite each other's file. Neither
part holds a dot, so no two releases share it. */}}
{{- define "kuberl.dashboardFile" -}}
{{- printf "%s.%s.json" .Release.Namespace (include "kuberl.fullname" .) -}}
{{- end -}}

{{- define "kuberl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kuberl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kuberl.labels" -}}
{{ include "kuberl.labelsOf" (dict "root" . "component" "operator") }}
{{- end -}}

{{/* The labels of an object of `component` (operator, test), then commonLabels and the object's own `extra` (a
     monitor's labels: they win over commonLabels'): each key once, as a strict YAML reader (yaml.v3, kustomize)
     refuses a key written twice. */}}
{{- define "kuberl.labelsOf" -}}
{{- with .root -}}
app.kubernetes.io/name: {{ include "kuberl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ $.component }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- $labels := dict -}}
{{- range $key, $value := .Values.commonLabels }}{{ $_ := set $labels $key $value }}{{ end -}}
{{- range $key, $value := $.extra }}{{ $_ := set $labels $key $value }}{{ end -}}
{{- with $labels }}
{{ include "kuberl.strings" . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Label keys the chart writes itself (its selectors use them): a values map that sets one would write it twice. */}}
{{- define "kuberl.ownLabelKeys" -}}
app.kubernetes.io/name app.kubernetes.io/instance app.kubernetes.io/component app.kubernetes.io/version app.kubernetes.io/managed-by helm.sh/chart
{{- end -}}

{{/* trainer.podDefaults as the operator reads it (JSON), label and annotation values as strings whatever --set made of them. */}}
{{- define "kuberl.podDefaultsJson" -}}
{{- $defaults := deepCopy .Values.trainer.podDefaults -}}
{{- range $field := list "labels" "annotations" "nodeSelector" -}}
{{- $strings := dict -}}
{{- range $key, $value := (get $defaults $field) -}}
{{- $_ := set $strings $key (toString $value) -}}
{{- end -}}
{{- $_ := set $defaults $field $strings -}}
{{- end -}}
{{- toJson $defaults -}}
{{- end -}}

{{/* The env kuberl gives each trainer pod (kuberl.core.contract.RESERVED_ENV_NAMES, and every KUBERL_ name): not a platform's default. */}}
{{- define "kuberl.reservedEnv" -}}
LOCAL_RANK MASTER_ADDR MASTER_PORT NNODES NODE_RANK NPROC_PER_NODE PET_LOCAL_ADDR PET_MASTER_ADDR PET_MASTER_PORT PET_NNODES PET_NODE_RANK PET_NPROC_PER_NODE PET_RDZV_CONF PET_RDZV_ENDPOINT PET_RDZV_ID RANK WORLD_SIZE
{{- end -}}

{{/* The environment the chart gives the operator, each name with what sets it instead of operator.env. */}}
{{- define "kuberl.ownEnv" -}}
KUBERL_LOG_LEVEL: set operator.logLevel
KUBERL_METRICS_ENABLED: set metrics.enabled
KUBERL_TRAINER_IMAGE: set trainer.image.repository and trainer.image.tag (or trainer.image.digest)
KUBERL_TRAINER_IMAGE_PULL_POLICY: set trainer.image.pullPolicy
KUBERL_TRAINER_IMAGE_PULL_SECRETS: set trainer.imagePullSecrets
KUBERL_TRAINER_CPU_PER_PROCESS: set trainer.resourcesPerProcess.cpu
KUBERL_TRAINER_MEMORY_PER_PROCESS: set trainer.resourcesPerProcess.memory
KUBERL_TRAINER_POD_DEFAULTS: set trainer.podDefaults
KUBERL_POD_NAMESPACE: the downward API gives the operator its namespace
KUBERL_POD_INDEX: the downward API gives each peering replica its ordinal
{{- end -}}

{{- define "kuberl.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "kuberl.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name must name an existing ServiceAccount when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository:tag or repository@digest; `what` names the values key in the error. */}}
{{- define "kuberl.image" -}}
{{- $image := .image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else if $image.tag -}}
{{- printf "%s:%s" $image.repository (toString $image.tag) -}}
{{- else -}}
{{- fail (printf "%s.image.tag is empty: set %s.image.tag (e.g. %s) or %s.image.digest" .what .what .appVersion .what) -}}
{{- end -}}
{{- end -}}

{{/* A values list of Secrets as their names, comma-separated: each is a name, or Kubernetes' own {name: ...}
     (what a pod spec and most charts take). */}}
{{- define "kuberl.secretNames" -}}
{{- $names := list -}}
{{- range . -}}
{{- if kindIs "map" . -}}
{{- $names = append $names .name -}}
{{- else -}}
{{- $names = append $names . -}}
{{- end -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{- define "kuberl.operatorImage" -}}
{{- include "kuberl.image" (dict "image" .Values.operator.image "what" "operator" "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{- define "kuberl.trainerImage" -}}
{{- include "kuberl.image" (dict "image" .Values.trainer.image "what" "trainer" "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{- define "kuberl.peering" -}}
{{- gt (int .Values.operator.replicas) 1 -}}
{{- end -}}

{{/* Every combination of values the schema cannot refuse, refused here with the keys named. */}}
{{- define "kuberl.validate" -}}
{{- /* keys other charts have at the top: the schema lets them through so the message can say where they belong */ -}}
{{- if hasKey .Values "image" -}}
{{- fail "image is not a value of this chart (it is a common chart's): set operator.image.repository and operator.image.tag (the operator) and trainer.image.repository and trainer.image.tag (the default trainer of jobs)" -}}
{{- end -}}
{{- if hasKey .Values "serviceAccount" -}}
{{- fail "serviceAccount is not a value of this chart (it is a common chart's): set operator.serviceAccount.create and operator.serviceAccount.name" -}}
{{- end -}}
{{- if hasKey .Values "resources" -}}
{{- fail "resources is not a value of this chart (it is a common chart's): set operator.resources (the operator) or trainer.resourcesPerProcess (each trainer process)" -}}
{{- end -}}
{{- if hasKey .Values "replicaCount" -}}
{{- fail "replicaCount is not a value of this chart (it is a common chart's): set operator.replicas" -}}
{{- end -}}
{{- if hasKey .Values "imagePullSecrets" -}}
{{- fail "imagePullSecrets is not a value of this chart (it is a common chart's): set operator.imagePullSecrets and trainer.imagePullSecrets" -}}
{{- end -}}
{{- $_ := include "kuberl.operatorImage" . -}}
{{- $_ := include "kuberl.trainerImage" . -}}
{{- include "kuberl.crdCheck" . -}}
{{- if and .Values.monitoring.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "monitoring.serviceMonitor.enabled=true needs metrics.enabled=true: the ServiceMonitor scrapes the operator's metrics Service" -}}
{{- end -}}
{{- if and .Values.monitoring.prometheusRule.enabled (not .Values.monitoring.serviceMonitor.enabled) -}}
{{- fail "monitoring.prometheusRule.enabled=true needs monitoring.serviceMonitor.enabled=true: the operator's alerts read the series its ServiceMonitor scrapes (KuberlOperatorDown would fire at once without it)" -}}
{{- end -}}
{{- if eq (int .Values.metrics.port) (int .Values.operator.health.port) -}}
{{- fail (printf "metrics.port and operator.health.port are both %d: the operator serves them on distinct ports" (int .Values.metrics.port)) -}}
{{- end -}}
{{- if and (include "kuberl.peering" . | eq "true") (not .Values.operator.peering.name) -}}
{{- fail "operator.replicas > 1 needs operator.peering.name: replicas coordinate through a kopf peering object" -}}
{{- end -}}
{{- /* the StatefulSet controller labels each pod controller-revision-hash=<name>-<hash>, a hash of up to 10 characters
     (pkg/controller/history ControllerRevisionName), and a label value holds 63: a longer name's pods are all refused */ -}}
{{- if and (include "kuberl.peering" . | eq "true") (gt (len (include "kuberl.fullname" .)) 52) -}}
{{- fail (printf "operator.replicas > 1 runs the operator as a StatefulSet named %s (%d characters), and the StatefulSet controller could create none of its pods: it labels each controller-revision-hash=<name>-<a hash of up to 10 characters>, a label value of at most 63 characters (kubernetes/kubernetes#64023); set fullnameOverride (or choose a release name) of at most 52 characters" (include "kuberl.fullname" .) (len (include "kuberl.fullname" .))) -}}
{{- end -}}
{{- /* map keys: a JSON schema's propertyNames error names no value (Helm reports it "at ''") */ -}}
{{- $labelKey := dict "pattern" `^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$` "maxName" 63 "fold" false
      "meaning" "a label key: an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit" -}}
{{- range $what, $map := dict "commonLabels" .Values.commonLabels "operator.podLabels" .Values.operator.podLabels "operator.nodeSelector" .Values.operator.nodeSelector
      "monitoring.serviceMonitor.labels" .Values.monitoring.serviceMonitor.labels "monitoring.podMonitor.labels" .Values.monitoring.podMonitor.labels
      "monitoring.prometheusRule.labels" .Values.monitoring.prometheusRule.labels
      "monitoring.dashboard.label" (dict .Values.monitoring.dashboard.label .Values.monitoring.dashboard.labelValue) -}}
{{- include "kuberl.checkKeys" (merge (dict "what" $what "map" $map) $labelKey) -}}
{{- range $own := splitList " " (include "kuberl.ownLabelKeys" $) -}}
{{- if and (hasKey $map $own) (ne $what "operator.nodeSelector") -}}
{{- fail (printf "%s sets %s, a label the chart writes itself (its selectors use it): choose another key" $what $own) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- include "kuberl.checkKeys" (merge (dict "what" "monitoring.prometheusPodLabels" "map" .Values.monitoring.prometheusPodLabels) $labelKey) -}}
{{- range $what, $map := dict "trainer.podDefaults.labels" .Values.trainer.podDefaults.labels "trainer.podDefaults.nodeSelector" .Values.trainer.podDefaults.nodeSelector -}}
{{- include "kuberl.checkKeys" (merge (dict "what" $what "map" $map) $labelKey) -}}
{{- end -}}
{{- include "kuberl.checkKeys" (merge (dict "what" "trainer.podDefaults.annotations" "map" .Values.trainer.podDefaults.annotations "fold" true "meaning" (printf "an annotation key (any case): %s" (trimPrefix "a label key: " $labelKey.meaning))) $labelKey) -}}
{{- range $what, $map := dict "trainer.podDefaults.labels" .Values.trainer.podDefaults.labels "trainer.podDefaults.annotations" .Values.trainer.podDefaults.annotations -}}
{{- range $key, $_ := $map -}}
{{- if hasPrefix "kuberl.dev/" $key -}}
{{- fail (printf "%s has the key %q: kuberl.dev/ is kuberl's own prefix (its labels select a job's pods); choose another" $what $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $i, $var := .Values.trainer.podDefaults.env -}}
{{- if or (has $var.name (splitList " " (include "kuberl.reservedEnv" $))) (hasPrefix "KUBERL_" $var.name) -}}
{{- fail (printf "trainer.podDefaults.env[%d] is %s, which kuberl sets in each pod (its rank, world size, rendezvous, KUBERL_ names): choose another" $i $var.name) -}}
{{- end -}}
{{- end -}}
{{- range $what, $map := dict "operator.podAnnotations" .Values.operator.podAnnotations "operator.serviceAccount.annotations" .Values.operator.serviceAccount.annotations
      "metrics.service.annotations" .Values.metrics.service.annotations -}}
{{- include "kuberl.checkKeys" (merge (dict "what" $what "map" $map "fold" true "meaning" (printf "an annotation key (any case): %s" (trimPrefix "a label key: " $labelKey.meaning))) $labelKey) -}}
{{- end -}}
{{- include "kuberl.checkKeys" (dict "what" "monitoring.prometheusRule.alertLabels" "map" .Values.monitoring.prometheusRule.alertLabels "pattern" "^[a-zA-Z_][a-zA-Z0-9_]*$" "maxName" 0 "fold" false
      "meaning" "a Prometheus label name: letters, digits and '_', not starting with a digit (Prometheus refuses the whole rule group otherwise)") -}}
{{- with .Values.monitoring.prometheusRule.alertLabels -}}
{{- if or (hasKey . "severity") (hasKey . "alertname") -}}
{{- fail "monitoring.prometheusRule.alertLabels sets severity or alertname: each alert sets its own (severity warning or critical); route on those, or add a label of another name" -}}
{{- end -}}
{{- end -}}
{{- $ownEnv := include "kuberl.ownEnv" . | fromYaml -}}
{{- range .Values.operator.env -}}
{{- if hasKey $ownEnv .name -}}
{{- fail (printf "operator.env sets %s, which the chart sets itself: %s" .name (get $ownEnv .name)) -}}
{{- end -}}
{{- end -}}
{{- range .Values.operator.volumes -}}
{{- if eq .name "tmp" -}}
{{- fail "operator.volumes names a volume tmp, the chart's own (the operator's scratch directory, /tmp): choose another name" -}}
{{- end -}}
{{- end -}}
{{- $volumes := list "tmp" -}}
{{- range .Values.operator.volumes }}{{ $volumes = append $volumes .name }}{{ end -}}
{{- range .Values.operator.volumeMounts -}}
{{- if eq (clean .mountPath) "/tmp" -}}
{{- fail "operator.volumeMounts mounts at /tmp, where the chart mounts the operator's scratch directory: choose another path" -}}
{{- end -}}
{{- if not (has .name $volumes) -}}
{{- fail (printf "operator.volumeMounts mounts %s, which is not a volume of operator.volumes" .name) -}}
{{- end -}}
{{- end -}}
{{- if ne (len .Values.operator.watchNamespaces) (len (uniq .Values.operator.watchNamespaces)) -}}
{{- fail (printf "operator.watchNamespaces lists a namespace twice: %v" .Values.operator.watchNamespaces) -}}
{{- end -}}
{{- end -}}

{{/* Helm installs crds/ only where the CRD is missing and never upgrades it: an upgrade (or an install over a CRD
     left behind) whose operator met an older schema would have the API server prune the fields it added. So the
     installed CRD's kuberl.dev/crd-sha256 (kuberl crd writes it) must be this chart's. `lookup` answers only with a
     cluster (helm install, upgrade, --dry-run=server); helm template checks nothing. A release with nothing outside
     its namespace leaves CRDs to the cluster's admin and does not look: a namespace's admin may not read CRDs, and
     Helm's lookup fails the install on a 403. */}}
{{- define "kuberl.crdCheck" -}}
{{- if include "kuberl.holdsClusterObjects" . | eq "true" -}}
{{- $installed := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "rltrainingjobs.kuberl.dev" -}}
{{- if $installed -}}
{{- $ours := index (.Files.Get "crds/rltrainingjobs.yaml" | fromYaml).metadata.annotations "kuberl.dev/crd-sha256" -}}
{{- $theirs := index ($installed.metadata.annotations | default dict) "kuberl.dev/crd-sha256" | default "none" -}}
{{- if ne $ours $theirs -}}
{{- fail (printf "the installed CRD rltrainingjobs.kuberl.dev is not this chart's (kuberl.dev/crd-sha256 %s, this chart's %s) and Helm never upgrades crds/: apply this chart's first, `%s` (or `helm show crds <chart> | kubectl apply --server-side --force-conflicts -f -`), then run this again" (trunc 12 $theirs) (trunc 12 $ours) (index .Chart.Annotations "kuberl.dev/crd-upgrade")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether the release writes a cluster-scoped object (a ClusterRole, a ClusterKopfPeering). */}}
{{- define "kuberl.holdsClusterObjects" -}}
{{- or .Values.rbac.userRoles (and (not .Values.operator.watchNamespaces) (or .Values.rbac.create (include "kuberl.peering" . | eq "true"))) -}}
{{- end -}}

{{/* kopf peering is cluster-wide when all namespaces are watched, per namespace otherwise. */}}
{{- define "kuberl.peeringKind" -}}
{{- if .Values.operator.watchNamespaces -}}KopfPeering{{- else -}}ClusterKopfPeering{{- end -}}
{{- end -}}

{{/* The operator's pod template, shared by the Deployment (one replica) and the StatefulSet (peering). */}}
{{- define "kuberl.operatorPodTemplate" -}}
metadata:
  labels:
    {{- include "kuberl.selectorLabels" . | nindent 4 }}
    {{- /* commonLabels too (a policy that requires a label of every Pod would refuse the operator's), podLabels winning; each key once */ -}}
    {{- $labels := dict -}}
    {{- range $key, $value := .Values.commonLabels }}{{ $_ := set $labels $key $value }}{{ end -}}
    {{- range $key, $value := .Values.operator.podLabels }}{{ $_ := set $labels $key $value }}{{ end -}}
    {{- with $labels }}
    {{- include "kuberl.strings" . | nindent 4 }}
    {{- end }}
  {{- with .Values.operator.podAnnotations }}
  annotations:
    {{- include "kuberl.strings" . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "kuberl.serviceAccountName" . }}
  automountServiceAccountToken: true
  {{- with .Values.operator.imagePullSecrets }}
  imagePullSecrets:
    {{- range splitList "," (include "kuberl.secretNames" .) }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  {{- with .Values.operator.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.operator.podSecurityContext | nindent 4 }}
  # The operator exits within its --shutdown-timeout (20 s) of SIGTERM, whatever hangs, saying what did: inside this.
  terminationGracePeriodSeconds: 30
  containers:
    - name: operator
      image: {{ include "kuberl.operatorImage" . }}
      imagePullPolicy: {{ .Values.operator.image.pullPolicy }}
      # An exit that ends in one line (RBAC refusing the operator's own watch, an API server down too long)
      # shows that line in `kubectl describe pod` as the last state's message.
      terminationMessagePolicy: FallbackToLogsOnError
      # The image's entrypoint is `kuberl operator`; these are its flags.
      args:
        {{- range .Values.operator.watchNamespaces }}
        - --namespace={{ . }}
        {{- end }}
        {{- if include "kuberl.peering" . | eq "true" }}
        - --peering={{ .Values.operator.peering.name }}
        - --priority=$(KUBERL_POD_INDEX)
        - --peering-lifetime={{ int64 .Values.operator.peering.failoverSeconds }}
        {{- end }}
        - --health-port={{ .Values.operator.health.port }}
        - --health-path={{ .Values.operator.health.path }}
        - --metrics-port={{ .Values.metrics.port }}
        - --monitoring-namespace={{ .Values.monitoring.prometheusNamespace }}
        - --monitoring-pod-labels={{ include "kuberl.pairs" .Values.monitoring.prometheusPodLabels }}
        # Of this namespace, only the operator's own pods scrape rank 0 through each job's NetworkPolicy.
        - --operator-pod-labels={{ include "kuberl.pairs" (include "kuberl.selectorLabels" . | fromYaml) }}
        - --pod-security={{ .Values.podSecurity }}
        {{- with .Values.allowedServiceAccounts }}
        - --allowed-service-accounts={{ join "," . }}
        {{- end }}
        {{- with .Values.forbidPodFields }}
        - --forbid-pod-fields={{ join "," . }}
        {{- end }}
        {{- with .Values.operator.scrapeIntervalSeconds }}
        - --scrape-interval={{ . }}
        {{- end }}
        {{- with .Values.operator.scrapeTimeoutSeconds }}
        - --scrape-timeout={{ . }}
        {{- end }}
        {{- with .Values.operator.maxConcurrentReconciles }}
        - --max-concurrent-reconciles={{ int64 . }}
        {{- end }}
        {{- if not (kindIs "invalid" .Values.operator.kubeApiQps) }}
        - --kube-api-qps={{ .Values.operator.kubeApiQps }}
        {{- end }}
        {{- with .Values.operator.kubeApiBurst }}
        - --kube-api-burst={{ int64 . }}
        {{- end }}
        {{- with .Values.operator.watchTimeoutSeconds }}
        - --watch-timeout={{ int64 . }}
        {{- end }}
      env:
        - name: KUBERL_LOG_LEVEL
          value: {{ .Values.operator.logLevel | quote }}
        - name: KUBERL_METRICS_ENABLED
          value: {{ .Values.metrics.enabled | quote }}
        - name: KUBERL_TRAINER_IMAGE
          value: {{ include "kuberl.trainerImage" . | quote }}
        - name: KUBERL_TRAINER_IMAGE_PULL_POLICY
          value: {{ .Values.trainer.image.pullPolicy | quote }}
        - name: KUBERL_TRAINER_IMAGE_PULL_SECRETS
          value: {{ include "kuberl.secretNames" .Values.trainer.imagePullSecrets | quote }}
        - name: KUBERL_TRAINER_CPU_PER_PROCESS
          value: {{ .Values.trainer.resourcesPerProcess.cpu | toString | quote }}
        - name: KUBERL_TRAINER_MEMORY_PER_PROCESS
          value: {{ .Values.trainer.resourcesPerProcess.memory | toString | quote }}
        - name: KUBERL_TRAINER_POD_DEFAULTS
          value: {{ include "kuberl.podDefaultsJson" . | quote }}
        - name: KUBERL_POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        {{- if include "kuberl.peering" . | eq "true" }}
        # A StatefulSet pod's ordinal: a distinct kopf priority per replica (equal ones freeze them all).
        - name: KUBERL_POD_INDEX
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
        {{- end }}
        {{- with .Values.operator.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.operator.envFrom }}
      # A name set above wins over the same name from these (the kubelet's order).
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        - name: health
          containerPort: {{ .Values.operator.health.port }}
          protocol: TCP
        {{- if .Values.metrics.enabled }}
        - name: metrics
          containerPort: {{ .Values.metrics.port }}
          protocol: TCP
        {{- end }}
      livenessProbe:
        httpGet:
          path: {{ .Values.operator.health.path }}
          port: health
        initialDelaySeconds: 10
        periodSeconds: 20
        timeoutSeconds: 5
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: {{ .Values.operator.health.path }}
          port: health
        periodSeconds: 10
        timeoutSeconds: 5
      resources:
        {{- toYaml .Values.operator.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.operator.securityContext | nindent 8 }}
      volumeMounts:
        # The root filesystem is read-only; Python and kopf may still want a scratch directory.
        - name: tmp
          mountPath: /tmp
        {{- with .Values.operator.volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- with .Values.operator.volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- include "kuberl.scheduling" . }}
  {{- $spread := .Values.operator.topologySpreadConstraints }}
  {{- if and (kindIs "invalid" $spread) (include "kuberl.peering" . | eq "true") }}
  # Replicas on distinct nodes where there are some: standbys on the active one's node die with it. ScheduleAnyway,
  # so a one-node cluster still runs them all.
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "kuberl.selectorLabels" . | nindent 10 }}
  {{- else if $spread }}
  topologySpreadConstraints:
    {{- toYaml $spread | nindent 4 }}
  {{- end }}
{{- end -}}

{{- /* Where the chart's pods may run: the operator's and `helm test`'s pod, so a cluster of tainted nodes runs both. */}}
{{- define "kuberl.scheduling" -}}
  {{- with .Values.operator.nodeSelector }}
  nodeSelector:
    {{- include "kuberl.strings" . | nindent 4 }}
  {{- end }}
  {{- with .Values.operator.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.operator.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* Rules for the namespaces whose jobs the operator runs: no secrets, no wildcards. */}}
{{- define "kuberl.jobRules" -}}
# Exactly the calls the operator makes (kuberl.operator.kubeapi.API_CALLS, enforced by its integration tests).
- apiGroups: [kuberl.dev]
  resources: [rltrainingjobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [kuberl.dev]
  resources: [rltrainingjobs/status]
  verbs: [patch]
# No request uses it: children's ownerReferences set blockOwnerDeletion, which needs update on the owner's finalizers.
- apiGroups: [kuberl.dev]
  resources: [rltrainingjobs/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [configmaps, persistentvolumeclaims, services]
  verbs: [create, get]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, get, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if has "volcano" .Values.gangScheduling.podGroupApis }}
- apiGroups: [scheduling.volcano.sh]
  resources: [podgroups]
  verbs: [create, get]
{{- end }}
{{- if has "coscheduling" .Values.gangScheduling.podGroupApis }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [create, get]
{{- end }}
{{- end }}

{{/* Fails naming `what` (a values key) when a key of `map` does not match `pattern` (lowercased first when `fold`)
     or its name after the last '/' is longer than `maxName` (0: no bound). */}}
{{- define "kuberl.checkKeys" -}}
{{- range $key, $_ := .map -}}
{{- $name := last (splitList "/" $key) -}}
{{- if or (not (regexMatch $.pattern (ternary (lower $key) $key $.fold))) (and $.maxName (gt (len $name) (int $.maxName))) -}}
{{- fail (printf "%s has the key %q, which is not %s" $.what $key $.meaning) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A map of labels as KEY=VALUE,KEY=VALUE (a flag's matchLabels; neither a key nor a value holds a comma). */}}
{{- define "kuberl.pairs" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key (toString $value)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* A map of labels or annotations as strings, whatever --set made of a value (true, 2): an annotation's or a
     label's value is a string to the API server, and toYaml would write a bare true that it refuses. */}}
{{- define "kuberl.strings" -}}
{{- $lines := list -}}
{{- range $key, $value := . -}}
{{- $lines = append $lines (printf "%s: %s" ($key | quote) (toString $value | quote)) -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}
