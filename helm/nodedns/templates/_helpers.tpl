{{/*
Names and labels shared by every object of the chart.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "nodedns.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The full name: fullnameOverride, or the release name when it already holds
the chart name, or release-chart. 63 characters: a DNS label.
*/}}
{{- define "nodedns.fullname" -}}
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

{{/* The k8s-app label value: k8sAppLabelOverride or the chart name. */}}
{{- define "nodedns.k8sapplabel" -}}
{{- default .Chart.Name .Values.k8sAppLabelOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels of every object. The cluster-service labels are those of kubeadm's
CoreDNS objects, so tools that look for the cluster DNS find nodedns.
*/}}
{{- define "nodedns.labels" -}}
app.kubernetes.io/name: {{ include "nodedns.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: "{{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}"
{{- if .Values.isClusterService }}
k8s-app: {{ include "nodedns.k8sapplabel" . }}
kubernetes.io/cluster-service: "true"
kubernetes.io/name: "CoreDNS"
{{- end }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Selector labels: the DaemonSet's selector and every Service's. They leave
out k8s-app on purpose: kubeadm's CoreDNS pods carry k8s-app=kube-dns too,
and listen on 53, not on the backend's fallback port, so selecting them
during a migration would send queries to a port nobody answers.
*/}}
{{- define "nodedns.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodedns.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* The ServiceAccount the pods run as. */}}
{{- define "nodedns.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nodedns.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image tag of both containers. */}}
{{- define "nodedns.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{/* Name of the backend's Corefile ConfigMap. */}}
{{- define "nodedns.backendConfigName" -}}
{{- include "nodedns.fullname" . }}-backend
{{- end -}}

{{/* Name of the frontend's settings ConfigMap. */}}
{{- define "nodedns.frontendConfigName" -}}
{{- include "nodedns.fullname" . }}-frontend
{{- end -}}

{{/* Name of the fallback Service. */}}
{{- define "nodedns.fallbackName" -}}
{{- include "nodedns.fullname" . }}-fallback
{{- end -}}

{{/*
The frontend's settings: a JSON list of [flag, variable, value]. Each
becomes a key of the frontend's ConfigMap (variable: value) and a flag of
its command line (--flag=$(variable)), which kubelet expands from the
ConfigMap when it starts the container. One list, so the two cannot
disagree. Settings that depend on the node (node-ip mode's address) are
not here: kubelet does not expand $(NODE_IP) inside a ConfigMap value, so
the DaemonSet passes them on the command line itself.
*/}}
{{- define "nodedns.frontendSettings" -}}
{{- $mode := .Values.mode -}}
{{- if not (has $mode (list "iptables" "link-local" "node-ip")) -}}
{{- fail (printf "mode must be iptables, link-local or node-ip, not %q" $mode) -}}
{{- end -}}
{{- $s := list (list "mode" "NODEDNS_MODE" $mode) -}}
{{- if ne $mode "node-ip" -}}
{{- $listen := list -}}
{{- range splitList "," .Values.localIP -}}
{{- $listen = append $listen (printf "%s:53" (include "nodedns.hostPort" (trim .))) -}}
{{- end -}}
{{- if eq $mode "iptables" -}}
{{- $ip := required "service.clusterIP is required in iptables mode: the frontend binds the kube-dns ClusterIP" .Values.service.clusterIP -}}
{{- $listen = append $listen (printf "%s:53" (include "nodedns.hostPort" $ip)) -}}
{{- end -}}
{{- $s = append $s (list "listen" "NODEDNS_LISTEN" (join "," $listen)) -}}
{{- $s = append $s (list "local-ip" "NODEDNS_LOCAL_IP" .Values.localIP) -}}
{{- $s = append $s (list "interface" "NODEDNS_INTERFACE" .Values.frontend.interface) -}}
{{- end -}}
{{- if eq $mode "iptables" -}}
{{- $s = append $s (list "service-ip" "NODEDNS_SERVICE_IP" .Values.service.clusterIP) -}}
{{- end -}}
{{- $s = append $s (list "backend" "NODEDNS_BACKEND" (printf "127.0.0.1:%v" .Values.backend.port)) -}}
{{- if .Values.fallback.enabled -}}
{{- $fip := required "fallback.clusterIP is required with fallback.enabled: the frontend takes an address" .Values.fallback.clusterIP -}}
{{- $s = append $s (list "fallback" "NODEDNS_FALLBACK" (printf "%s:53" (include "nodedns.hostPort" $fip))) -}}
{{- end -}}
{{- $s = append $s (list "backend-ready-url" "NODEDNS_BACKEND_READY_URL" (printf "http://127.0.0.1:%v/ready" .Values.backend.readyPort)) -}}
{{- $s = append $s (list "metrics" "NODEDNS_METRICS" (printf ":%v" .Values.frontend.metricsPort)) -}}
{{- $s = append $s (list "health" "NODEDNS_HEALTH" (printf ":%v" .Values.frontend.healthPort)) -}}
{{- $s = append $s (list "sync-interval" "NODEDNS_SYNC_INTERVAL" (toString .Values.syncInterval)) -}}
{{- $s = append $s (list "log-level" "NODEDNS_LOG_LEVEL" (toString .Values.logLevel)) -}}
{{- $s = append $s (list "max-inflight" "NODEDNS_MAX_INFLIGHT" (int64 .Values.maxInflight | toString)) -}}
{{- $c := .Values.cache -}}
{{- $s = append $s (list "cache-size" "NODEDNS_CACHE_SIZE" (int64 $c.size | toString)) -}}
{{- $s = append $s (list "cache-negative-size" "NODEDNS_CACHE_NEGATIVE_SIZE" (int64 $c.negativeSize | toString)) -}}
{{- $s = append $s (list "cache-min-ttl" "NODEDNS_CACHE_MIN_TTL" (toString $c.minTTL)) -}}
{{- $s = append $s (list "cache-max-ttl" "NODEDNS_CACHE_MAX_TTL" (toString $c.maxTTL)) -}}
{{- $s = append $s (list "cache-negative-max-ttl" "NODEDNS_CACHE_NEGATIVE_MAX_TTL" (toString $c.negativeMaxTTL)) -}}
{{- $s = append $s (list "cache-servfail-ttl" "NODEDNS_CACHE_SERVFAIL_TTL" (toString $c.servfailTTL)) -}}
{{- $s = append $s (list "serve-stale" "NODEDNS_SERVE_STALE" (toString $c.serveStale)) -}}
{{- $s = append $s (list "prefetch-hits" "NODEDNS_PREFETCH_HITS" (int64 $c.prefetchHits | toString)) -}}
{{- toJson $s -}}
{{- end -}}

{{/* An IP as the host part of host:port: IPv6 in brackets. */}}
{{- define "nodedns.hostPort" -}}
{{- if contains ":" . -}}[{{ . }}]{{- else -}}{{ . }}{{- end -}}
{{- end -}}
