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
{{/*
Labels of the pods: the chart's labels without the cluster-service ones
(k8s-app, kubernetes.io/cluster-service, kubernetes.io/name), which stay on
the DaemonSet and the Service. kubeadm's kube-dns Service selects
k8s-app=kube-dns with target port 53: while it still fronts CoreDNS
(service.create=false, the first step of docs/migration.md), a nodedns pod
carrying that label would join it with its node IP, where nothing listens
on 53, and pods on nodes not yet taken over would lose their share of
queries to it.
*/}}
{{- define "nodedns.podLabels" -}}
app.kubernetes.io/name: {{ include "nodedns.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: "{{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}"
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

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
The frontend's settings: a JSON list of [flag, variable, value], the
variable being NODEDNS_ and the flag's name in capitals. Each becomes a key
of the frontend's ConfigMap (variable: value) and a flag of its command
line (--flag=$(variable)), which kubelet expands from the ConfigMap when it
starts the container. One list, so the two cannot disagree. Settings that
depend on the node (node-ip mode's address) are not here: kubelet does not
expand $(NODE_IP) inside a ConfigMap value, so the DaemonSet passes them on
the command line itself. So does it with the flags that carry the pod
template's probe address (--health, --backend-ready-url): the ConfigMap is
one for the old and the new pods of a surge, and a frontend restarted in an
old pod would read the new pods' address while its probes keep the old one.
*/}}
{{- define "nodedns.frontendSettings" -}}
{{- $mode := .Values.mode -}}
{{- if not (has $mode (list "iptables" "link-local" "node-ip")) -}}
{{- fail (printf "mode must be iptables, link-local or node-ip, not %q" $mode) -}}
{{- end -}}
{{- $f := list (list "mode" $mode) -}}
{{- if ne $mode "node-ip" -}}
{{- $listen := list -}}
{{- range splitList "," .Values.localIP -}}
{{- $listen = append $listen (printf "%s:53" (include "nodedns.hostPort" (trim .))) -}}
{{- end -}}
{{- if eq $mode "iptables" -}}
{{- $ip := required "service.clusterIP is required in iptables mode: the frontend binds the kube-dns ClusterIP" .Values.service.clusterIP -}}
{{- $listen = append $listen (printf "%s:53" (include "nodedns.hostPort" $ip)) -}}
{{- end -}}
{{- $f = append $f (list "listen" (join "," $listen)) -}}
{{- $f = append $f (list "local-ip" .Values.localIP) -}}
{{- $f = append $f (list "interface" .Values.frontend.interface) -}}
{{- end -}}
{{- if eq $mode "iptables" -}}
{{- $f = append $f (list "service-ip" .Values.service.clusterIP) -}}
{{- end -}}
{{- $f = append $f (list "backend" (printf "127.0.0.1:%v" .Values.backend.port)) -}}
{{- if .Values.fallback.enabled -}}
{{- $fip := required "fallback.clusterIP is required with fallback.enabled: the frontend takes an address" .Values.fallback.clusterIP -}}
{{- $f = append $f (list "fallback" (printf "%s:%v" (include "nodedns.hostPort" $fip) .Values.backend.fallbackPort)) -}}
{{- end -}}
{{- $f = append $f (list "handover-dir" .Values.frontend.handoverDir) -}}
{{- $f = append $f (list "shutdown-timeout" (toString .Values.frontend.shutdownTimeout)) -}}
{{- $f = append $f (list "sync-interval" (toString .Values.syncInterval)) -}}
{{- $f = append $f (list "log-level" (toString .Values.logLevel)) -}}
{{- $f = append $f (list "max-inflight" (int64 .Values.maxInflight | toString)) -}}
{{- $f = append $f (list "shed-delay" (toString .Values.shedDelay)) -}}
{{- $c := .Values.cache -}}
{{- $f = append $f (list "cache-size" (int64 $c.size | toString)) -}}
{{- $f = append $f (list "negative-cache-size" (int64 $c.negativeSize | toString)) -}}
{{- $f = append $f (list "min-ttl" (toString $c.minTTL)) -}}
{{- $f = append $f (list "max-ttl" (toString $c.maxTTL)) -}}
{{- $f = append $f (list "negative-max-ttl" (toString $c.negativeMaxTTL)) -}}
{{- $f = append $f (list "servfail-ttl" (toString $c.servfailTTL)) -}}
{{- $f = append $f (list "serve-stale" (toString $c.serveStale)) -}}
{{- $f = append $f (list "prefetch" (int64 $c.prefetchHits | toString)) -}}
{{- $f = append $f (list "cluster-domain" .Values.clusterDomain) -}}
{{- $f = append $f (list "cluster-negative-max-ttl" (toString $c.clusterNegativeMaxTTL)) -}}
{{- $plain := not (include "nodedns.clusterDomainShared" .) -}}
{{- $f = append $f (list "search-prefetch" (toString (and $c.searchPrefetch $plain))) -}}
{{- $f = append $f (list "deny-below-nxdomain" (toString (and $c.denyBelowNXDOMAIN $plain))) -}}
{{- $s := list -}}
{{- range $f -}}
{{- $s = append $s (list (index . 0) (printf "NODEDNS_%s" (index . 0 | upper | replace "-" "_")) (index . 1)) -}}
{{- end -}}
{{- toJson $s -}}
{{- end -}}

{{/* An IP as the host part of host:port: IPv6 in brackets. */}}
{{- define "nodedns.hostPort" -}}
{{- if contains ":" . -}}[{{ . }}]{{- else -}}{{ . }}{{- end -}}
{{- end -}}

{{/*
Whether the backend runs as a native sidecar: backend.nativeSidecar true or
false, or "auto" for Kubernetes 1.29 and later (where sidecars are on by
default). An older API server would drop restartPolicy from the init
container, and the backend, which never exits, would keep the frontend from
ever starting.
*/}}
{{- define "nodedns.nativeSidecar" -}}
{{- $v := .Values.backend.nativeSidecar -}}
{{- if eq (toString $v) "auto" -}}
{{- if semverCompare ">=1.29.0-0" .Capabilities.KubeVersion.Version }}true{{ end -}}
{{- else if $v -}}
true
{{- end -}}
{{- end -}}

{{/*
The address of the pod's probe endpoints: the frontend's /health and
/ready, the backend's /ready and /health. During a surge the old and the
new pod run side by side in the node's network namespace, each binding
these ports with SO_REUSEPORT; on a shared address the kernel spreads
kubelet's probes and the frontend's backend gate over both pods, so the old
pod could answer for the new one. Each pod template therefore gets a
loopback address of its own (all of 127.0.0.0/8 is local on Linux, and
kubelet probes from the node's network namespace, which the pods share).

probeAddress "auto": 127.X.Y.1, X in 1..254 (never 127.0.0.0/24, where
127.0.0.1 lives) and Y in 0..255, from a checksum of the DaemonSet as
rendered with probeAddress "": whatever changes the pod template (values,
the chart's version and appVersion in the labels, the cluster version that
backend.nativeSidecar auto follows, the frontend settings' checksum) changes
the address, with odds of about 1 in 65,000 of two revisions drawing the
same one; values the pod template does not use (a Corefile edit, which the
reload plugin applies in place) leave it, so they do not roll the pods.
An explicit address in 127.0.0.0/8 is used as given; "" binds every
address and leaves the probes to the pod IP, as before the probe address
existed.
*/}}
{{- define "nodedns.probeAddress" -}}
{{- $v := toString .Values.probeAddress -}}
{{- if eq $v "auto" -}}
{{- $values := merge (dict) .Values -}}
{{- $_ := set $values "probeAddress" "" -}}
{{- $ctx := dict "Values" $values "Chart" .Chart "Release" .Release "Capabilities" .Capabilities "Template" .Template "Files" .Files -}}
{{- $sum := include (print .Template.BasePath "/daemonset.yaml") $ctx | adler32sum | atoi -}}
{{- printf "127.%d.%d.1" (add1 (mod $sum 254)) (mod (div $sum 254) 256) -}}
{{- else if $v -}}
{{- $octet := "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])" -}}
{{- if not (regexMatch (printf "^127\\.%s\\.%s\\.%s$" $octet $octet $octet) $v) -}}
{{- fail (printf "probeAddress must be \"auto\", \"\" or an IPv4 address in 127.0.0.0/8, not %q" $v) -}}
{{- end -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{/*
Why names of clusterDomain may be answered by something other than the
kubernetes plugin of the frontend's server block, one reason per line, or
nothing. The frontend's search-path prefetch and its denial below a cached
NXDOMAIN (RFC 8020) hold only when that plugin alone answers them: a stub
domain inside the cluster domain sends prefetched names out, and hosts,
rewrite, file or a fallthrough answer names under a denied one. The
flags --search-prefetch and --deny-below-nxdomain are false then, and
NOTES.txt says why. Each reason names the value.
*/}}
{{- define "nodedns.clusterDomainShared" -}}
{{- $domain := trimSuffix "." (lower .Values.clusterDomain) -}}
{{- $inside := dict -}}
{{- range $zone, $_ := .Values.stubDomains -}}
{{- $z := trimSuffix "." (lower $zone) -}}
{{- if or (eq $z $domain) (hasSuffix (printf ".%s" $domain) $z) (hasSuffix (printf ".%s" $z) $domain) }}
stubDomains.{{ $zone }} overlaps clusterDomain {{ $domain }}
{{- end -}}
{{- end -}}
{{- $port := printf "%v" .Values.backend.port -}}
{{- $safe := list "bind" "errors" "health" "ready" "prometheus" "nodedns_kubernetes" "kubernetes" "forward" "cache" "loop" "reload" "loadbalance" "log" "debug" "acl" -}}
{{- $options := list "endpointslices" "pods" "ttl" "startup_timeout" "kubeconfig" "endpoint" "tls" "namespaces" "namespace_labels" "labels" "noendpoints" "endpoint_pod_names" "ignore" "fallthrough" -}}
{{- range $i, $s := .Values.servers -}}
{{- $frontendBlock := false -}}
{{- range ($s.zones | default (list (dict "zone" "."))) -}}
{{- $z := trimSuffix "." (lower (.zone | default ".")) -}}
{{- if eq $z "" -}}
{{- if or (eq (toString $s.port) "{$NODEDNS_PORT}") (eq (toString $s.port) $port) -}}{{- $frontendBlock = true -}}{{- end -}}
{{- else if or (eq $z $domain) (hasSuffix (printf ".%s" $domain) $z) (hasSuffix (printf ".%s" $z) $domain) }}
servers[{{ $i }}] serves zone {{ .zone }}, which overlaps clusterDomain {{ $domain }}
{{- end -}}
{{- end -}}
{{- if $frontendBlock -}}
{{- range $s.plugins -}}
{{- if not (has .name $safe) }}
servers[{{ $i }}] has the {{ .name }} plugin, which may answer names of clusterDomain {{ $domain }}
{{- else if or (eq .name "nodedns_kubernetes") (eq .name "kubernetes") -}}
{{- range (splitList "\n" (.configBlock | default "")) -}}
{{- $w := splitList " " (trim .) | compact -}}
{{- if $w -}}
{{- $opt := first $w -}}
{{- if not (has $opt $options) }}
servers[{{ $i }}] sets the kubernetes plugin's {{ $opt }}, not known to keep RFC 8020
{{- else if and (eq $opt "fallthrough") (or (eq (len $w) 1) (not (empty (without (rest $w) "in-addr.arpa" "ip6.arpa" "in-addr.arpa." "ip6.arpa.")))) }}
servers[{{ $i }}] has the kubernetes plugin fall through for names it denies ({{ trim . }})
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
