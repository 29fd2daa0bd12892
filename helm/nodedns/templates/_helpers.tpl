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
Labels of the pods: the chart's labels and, with isClusterService, the
k8s-app label alone of the cluster-service ones. kubeadm's kube-dns Service
selects k8s-app=kube-dns with target ports 53 (dns, dns-tcp) and 9153
(metrics): each nodedns pod is a valid endpoint of it as it is, its
backend's fallback listener on the node IP's port 53 and its metrics on
9153, so the Service needs no change and the CoreDNS pods and the nodedns
pods can serve behind it side by side (docs/migration.md, "Install without
adoption"). kubectl get pods -l k8s-app=kube-dns lists them, as the
Kubernetes DNS debugging guide expects.
*/}}
{{- define "nodedns.podLabels" -}}
app.kubernetes.io/name: {{ include "nodedns.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: "{{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}"
{{- if .Values.isClusterService }}
k8s-app: {{ include "nodedns.k8sapplabel" . }}
{{- end }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Selector labels: the DaemonSet's selector and the chart's Services'. They
leave out k8s-app: the CoreDNS Deployment's pods carry it too, and a
DaemonSet selector matching pods it does not own would fight their
controller.
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

{{/* Name of the fallback Service. */}}
{{- define "nodedns.fallbackName" -}}
{{- include "nodedns.fullname" . }}-fallback
{{- end -}}

{{/*
The frontend's settings: a JSON list of [flag, value], written into the
DaemonSet's pod template as --flag=value. Not a ConfigMap the pods read at
start: one ConfigMap is shared by the old and the new pods of a rollout and
rewritten in place by `helm upgrade`, so a frontend restarted in an old pod
would start with the new revision's settings (another mode, flags its
binary does not know). In the pod template every revision's pods keep their
own. Settings that depend on the node (node-ip mode's address) or on the
pod template's probe address are added by the DaemonSet itself.
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
{{- range splitList "," (include "nodedns.serviceIPs" .) -}}
{{- $listen = append $listen (printf "%s:53" (include "nodedns.hostPort" .)) -}}
{{- end -}}
{{- end -}}
{{- $f = append $f (list "listen" (join "," $listen)) -}}
{{- $f = append $f (list "local-ip" .Values.localIP) -}}
{{- $f = append $f (list "interface" .Values.frontend.interface) -}}
{{- end -}}
{{- /* node-ip mode owns the ClusterIP too (its listen address is the DaemonSet's):
pods naming it are answered on their node, never DNATed by kube-proxy to the
node IP, whose answers the NOTRACK rules keep from the reverse NAT (docs/modes.md). */ -}}
{{- if ne $mode "link-local" -}}
{{- $f = append $f (list "service-ip" (include "nodedns.serviceIPs" .)) -}}
{{- end -}}
{{- if eq $mode "node-ip" -}}
{{- $f = append $f (list "interface" .Values.frontend.interface) -}}
{{- end -}}
{{- /* Every mode: where queries to the local IP go when no frontend serves them (the release table). */ -}}
{{- $f = append $f (list "release-to" (include "nodedns.serviceIPs" .)) -}}
{{- $f = append $f (list "backend" (printf "127.0.0.1:%v" .Values.backend.port)) -}}
{{- $f = append $f (list "allow-networks" (join "," .Values.frontend.allowedNetworks)) -}}
{{- if not (has .Values.frontend.iptablesBackend (list "auto" "nft" "legacy")) -}}
{{- fail (printf "frontend.iptablesBackend must be auto, nft or legacy, not %q" .Values.frontend.iptablesBackend) -}}
{{- end -}}
{{- $f = append $f (list "iptables-backend" .Values.frontend.iptablesBackend) -}}
{{- if .Values.fallback.enabled -}}
{{- $f = append $f (list "fallback" (include "nodedns.fallbackAddress" .)) -}}
{{- end -}}
{{- $f = append $f (list "handover-dir" .Values.frontend.handoverDir) -}}
{{- $f = append $f (list "shutdown-timeout" (toString .Values.frontend.shutdownTimeout)) -}}
{{- $f = append $f (list "answer-timeout" (toString .Values.frontend.answerTimeout)) -}}
{{- $f = append $f (list "lameduck" (toString .Values.frontend.lameduck)) -}}
{{- $f = append $f (list "sync-interval" (toString .Values.syncInterval)) -}}
{{- $f = append $f (list "log-level" (toString .Values.logLevel)) -}}
{{- $f = append $f (list "max-inflight" (int64 .Values.maxInflight | toString)) -}}
{{- $f = append $f (list "shed-delay" (toString .Values.shedDelay)) -}}
{{- $f = append $f (list "query-log" (join "," .Values.frontend.queryLog.zones)) -}}
{{- $f = append $f (list "query-log-sample" (toString .Values.frontend.queryLog.sample)) -}}
{{- $f = append $f (list "top-talkers" (int64 .Values.frontend.topTalkers | toString)) -}}
{{- $f = append $f (list "pass-client-address" (toString .Values.frontend.passClientAddress)) -}}
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
{{- toJson $f -}}
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
{{- $safe := list "bind" "nodedns_client" "errors" "health" "ready" "prometheus" "nodedns_kubernetes" "kubernetes" "forward" "cache" "loop" "reload" "loadbalance" "log" "debug" "acl" -}}
{{- $options := list "endpointslices" "pods" "ttl" "startup_timeout" "kubeconfig" "endpoint" "tls" "namespaces" "namespace_labels" "labels" "noendpoints" "endpoint_pod_names" "ignore" "fallthrough" "snapshot" -}}
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

{{/*
Pod Security admission: the pods need the privileged level (hostNetwork,
hostPath volumes, the NET_ADMIN capability, root). In a release namespace
labelled pod-security.kubernetes.io/enforce=baseline or restricted, the API
server would take the DaemonSet and refuse every pod it makes, leaving the
nodes' DNS to whatever was there; the install is refused instead, saying
why. Without a cluster (helm template) lookup finds nothing; a cluster-wide
default level of the admission configuration is not visible here
(docs/security.md, "Pod Security").
*/}}
{{- define "nodedns.podSecurityCheck" -}}
{{- $ns := lookup "v1" "Namespace" "" .Release.Namespace | default dict -}}
{{- $labels := (get (get $ns "metadata" | default dict) "labels") | default dict -}}
{{- $level := get $labels "pod-security.kubernetes.io/enforce" -}}
{{- if has $level (list "baseline" "restricted") -}}
{{- fail (printf "namespace %s enforces the Pod Security level %q (its label pod-security.kubernetes.io/enforce), and the API server would refuse every nodedns pod: they need the privileged level (hostNetwork, hostPath volumes, the NET_ADMIN capability, running as root, probes on a loopback host address). Install into kube-system, or label the namespace pod-security.kubernetes.io/enforce=privileged (docs/security.md, section Pod Security)" .Release.Namespace $level) -}}
{{- end -}}
{{- end -}}

{{/*
Whether the chart is rendered without a cluster: lookup finds no Namespace
kube-system, which every cluster has. That is `helm template` (with or
without --validate; Argo CD renders so), `helm install --dry-run` (client)
and `helm lint`; `helm install`, `helm upgrade`, `--dry-run=server` and
Flux's helm-controller read the cluster.
*/}}
{{- define "nodedns.withoutCluster" -}}
{{- if not (lookup "v1" "Namespace" "" "kube-system") -}}
true
{{- end -}}
{{- end -}}

{{/*
Refuses a rendering without a cluster unless the values are those that are
safe to apply as they are (docs/gitops.md). Without a cluster the chart
cannot see the DNS Service, its ClusterIP or CoreDNS: with the defaults it
would render a kube-dns Service selecting only the nodedns pods (applied
over the cluster's, CoreDNS's pods leave it), bind 10.96.0.10 whatever
kubelet's clusterDNS is, and render the handoff Jobs, whose scale-down
Argo CD runs (PostSync) and whose pre-delete restore it never runs. The
message names each value to set and the two to check.
*/}}
{{- define "nodedns.withoutClusterCheck" -}}
{{- if include "nodedns.withoutCluster" . -}}
{{- $set := list -}}
{{- if .Values.service.create -}}
{{- $set = append $set "service.create=false (the cluster's DNS Service stays as it is)" -}}
{{- end -}}
{{- if not .Values.service.clusterIP -}}
{{- $set = append $set "service.clusterIP=<the cluster's DNS ClusterIP, kubelet's clusterDNS: 10.96.0.10 on kubeadm, 10.43.0.10 on k3s and RKE2, 10.233.0.3 on kubespray>" -}}
{{- end -}}
{{- if .Values.coreDNS.deployment -}}
{{- $set = append $set (printf `coreDNS.deployment="" (not %q: no handoff hooks, CoreDNS keeps serving)` .Values.coreDNS.deployment) -}}
{{- end -}}
{{- if $set -}}
{{- $fallback := .Values.fallback.clusterIP | default "the DNS ClusterIP + 1" -}}
{{- fail (printf "rendered without a cluster (helm template, Argo CD, helm install --dry-run=client: lookup finds no Namespace kube-system), the chart cannot see the cluster's DNS Service, its ClusterIP or CoreDNS. Set %s; check service.name=%s (the cluster's DNS Service: rke2-coredns-rke2-coredns on RKE2, coredns on kubespray) and fallback.clusterIP (%s; must be a free address of the service CIDR). See docs/gitops.md; helm install and helm install --dry-run=server read the cluster and need none of this" (join ", " $set) .Values.service.name $fallback) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The existing kube-dns Service (service.name in the release namespace) as
the cluster has it, or an empty dict: with no cluster (helm template, the
tests' renderings, pod.yaml) lookup returns nothing.
*/}}
{{- define "nodedns.existingService" -}}
{{- if .Values.service.name -}}
{{- toJson (lookup "v1" "Service" .Release.Namespace .Values.service.name | default dict) -}}
{{- else -}}
{{- /* An empty name would make lookup list every Service. */ -}}
{{- toJson dict -}}
{{- end -}}
{{- end -}}

{{/*
Whether the chart renders the kube-dns Service: service.create, and no
Service of that name exists unless this release owns it (Helm's ownership
annotations). kubeadm's kube-dns is left exactly as it is: the nodedns pods
are valid endpoints of it (nodedns.podLabels), so taking it over would
change nothing but who deletes it.
*/}}
{{- define "nodedns.renderService" -}}
{{- if .Values.service.create -}}
{{- $svc := include "nodedns.existingService" . | fromJson -}}
{{- if not $svc -}}
true
{{- else -}}
{{- $a := $svc.metadata.annotations | default dict -}}
{{- if and (eq (get $a "meta.helm.sh/release-name") .Release.Name) (eq (get $a "meta.helm.sh/release-namespace") .Release.Namespace) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The kube-dns ClusterIP the frontend binds (iptables mode) and the chart's
Service asks for: the existing Service's, else service.clusterIP, else
10.96.0.10 (kubeadm's default: the 10th address of 10.96.0.0/12). An
explicit service.clusterIP that differs from the existing Service's fails:
pods' resolv.conf names the existing one.
*/}}
{{- define "nodedns.serviceIP" -}}
{{- $svc := include "nodedns.existingService" . | fromJson -}}
{{- $want := toString (.Values.service.clusterIP | default "") -}}
{{- if $svc -}}
{{- $ip := $svc.spec.clusterIP | default "" -}}
{{- if or (eq $ip "") (eq $ip "None") -}}
{{- fail (printf "Service %s/%s exists but has no ClusterIP (%q): nodedns answers the kube-dns ClusterIP, which pods' resolv.conf names" .Release.Namespace .Values.service.name $ip) -}}
{{- end -}}
{{- if and $want (ne $want $ip) -}}
{{- fail (printf "service.clusterIP is %s but Service %s/%s exists with ClusterIP %s, which pods' resolv.conf names: leave service.clusterIP empty to use it" $want .Release.Namespace .Values.service.name $ip) -}}
{{- end -}}
{{- $ip -}}
{{- else -}}
{{- $want | default "10.96.0.10" -}}
{{- end -}}
{{- end -}}

{{/*
Every ClusterIP of the DNS Service, comma-separated: a dual-stack kube-dns
(ipFamilyPolicy PreferDualStack or RequireDualStack) has one per family,
and the frontend owns each in iptables mode, so that pods naming either
are answered on their node. Without a Service of the cluster, the one of
nodedns.serviceIP.
*/}}
{{- define "nodedns.serviceIPs" -}}
{{- $svc := include "nodedns.existingService" . | fromJson -}}
{{- $ip := include "nodedns.serviceIP" . -}}
{{- $ips := list $ip -}}
{{- if $svc -}}
{{- range ($svc.spec.clusterIPs | default list) -}}
{{- if not (has . $ips) -}}
{{- $ips = append $ips . -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," $ips -}}
{{- end -}}

{{/*
The fallback Service's ClusterIP, which the frontend takes as an address
(it is the resolver, it resolves no name): fallback.clusterIP, or, when
empty, the kube-dns ClusterIP + 1 (IPv4), an address of the low band of the
service CIDR that Kubernetes keeps for static assignment. With a cluster,
an address held by another Service fails the install, naming it.
*/}}
{{- define "nodedns.fallbackIP" -}}
{{- $ip := toString (.Values.fallback.clusterIP | default "") -}}
{{- $derived := false -}}
{{- if not $ip -}}
{{- $svcIP := include "nodedns.serviceIP" . -}}
{{- $o := splitList "." $svcIP -}}
{{- if or (ne (len $o) 4) (eq (index $o 3) "255") -}}
{{- fail (printf "fallback.clusterIP is empty and cannot be derived from the kube-dns ClusterIP %s (IPv4 below .255 only): set fallback.clusterIP to a free address of the service CIDR" $svcIP) -}}
{{- end -}}
{{- $ip = printf "%s.%s.%s.%d" (index $o 0) (index $o 1) (index $o 2) (add1 (atoi (index $o 3))) -}}
{{- $derived = true -}}
{{- end -}}
{{- $mine := printf "%s/%s" .Release.Namespace (include "nodedns.fallbackName" .) -}}
{{- range (lookup "v1" "Service" "" "").items | default list -}}
{{- $name := printf "%s/%s" .metadata.namespace .metadata.name -}}
{{- if and (has $ip (.spec.clusterIPs | default (list .spec.clusterIP))) (ne $name $mine) -}}
{{- fail (printf "fallback.clusterIP %s%s is taken by Service %s: set fallback.clusterIP to a free address of the service CIDR" $ip (ternary " (the kube-dns ClusterIP + 1)" "" $derived) $name) -}}
{{- end -}}
{{- end -}}
{{- $ip -}}
{{- end -}}

{{/*
The fallback Service's address, IP:port: the frontend's --fallback and the
holder's --relay.
*/}}
{{- define "nodedns.fallbackAddress" -}}
{{- printf "%s:%v" (include "nodedns.hostPort" (include "nodedns.fallbackIP" .)) (include "nodedns.fallbackPort" .) -}}
{{- end -}}

{{/*
The port of the backend's fallback listener on the node IP: the target of
the fallback Service and of the kube-dns Service. backend.fallbackPort
"auto": 53 in iptables and link-local modes, the target port of kubeadm's
kube-dns Service, so the nodedns pods serve behind it unchanged; 5301 in
node-ip mode, where the frontend holds the node IP's port 53 (and serves
kube-dns's traffic there itself). A number is used as given.
*/}}
{{- define "nodedns.fallbackPort" -}}
{{- $v := toString .Values.backend.fallbackPort -}}
{{- if eq $v "auto" -}}
{{- ternary "5301" "53" (eq .Values.mode "node-ip") -}}
{{- else -}}
{{- if and (eq $v "53") (eq .Values.mode "node-ip") -}}
{{- fail "backend.fallbackPort 53 in node-ip mode: the frontend listens on the node IP's port 53; use auto (5301) or another port" -}}
{{- end -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{/* Name of the handoff hooks' ServiceAccount, Role and Jobs. */}}
{{- define "nodedns.handoffName" -}}
{{- include "nodedns.fullname" . | trunc 44 | trimSuffix "-" }}-handoff
{{- end -}}

{{/*
Refuses a `helm upgrade` that changes mode, before anything changes: the
old pods' frontends own the old mode's addresses and rules, kubelet's
clusterDNS names the old mode's address, and a rollout would leave each
node between the two (node-ip's port 53 under another user than the new
pod's, the ClusterIP or 169.254.20.10 owned by a pod that no longer
serves it). The running mode is the existing DaemonSet's frontend --mode
(the settings live in the pod template); with no cluster (helm template)
or no such DaemonSet, lookup returns nothing and nothing is checked.
*/}}
{{- define "nodedns.modeSwitch" -}}
{{- $ds := lookup "apps/v1" "DaemonSet" .Release.Namespace (include "nodedns.fullname" .) | default dict -}}
{{- if $ds -}}
{{- range $ds.spec.template.spec.containers | default list -}}
{{- if eq .name "frontend" -}}
{{- range .args | default list -}}
{{- if hasPrefix "--mode=" . -}}
{{- $running := trimPrefix "--mode=" . -}}
{{- if ne $running $.Values.mode -}}
{{- fail (printf "mode is %s on this cluster (DaemonSet %s/%s) and %s in these values: helm upgrade does not switch modes, nothing was changed. To switch: helm uninstall %s -n %s (every node keeps answering through kube-dns meanwhile), point kubelet's clusterDNS at the new mode's address if it differs, then helm install with --set mode=%s (docs/modes.md, \"Switching modes\"); or keep mode=%s" $running $.Release.Namespace $ds.metadata.name $.Values.mode $.Release.Name $.Release.Namespace $.Values.mode $running) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
