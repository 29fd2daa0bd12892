{{/*
The backend container, shared by the native-sidecar layout (an init
container with restartPolicy Always) and the plain one (a second container).
*/}}
{{- define "nodedns.backendContainer" -}}
{{- $probe := include "nodedns.probeAddress" . -}}
name: backend
image: "{{ .Values.image.backend.repository }}:{{ include "nodedns.imageTag" . }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if (include "nodedns.nativeSidecar" .) }}
# A native sidecar: kubelet starts the frontend once the startup probe
# passes, and stops the backend after the frontend.
restartPolicy: Always
{{- end }}
command: ["nodedns-backend"]
args:
  - -conf
  - /etc/nodedns/Corefile
  {{- with .Values.backend.extraArgs }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
env:
  # The Corefile's {$NAME} variables (upstreams are written into the
  # Corefile itself). Set explicitly, so nothing else in the environment
  # can change them.
  - name: NODEDNS_NODE_IP
    valueFrom:
      fieldRef:
        fieldPath: status.hostIP
  - name: NODEDNS_BIND
    value: "127.0.0.1"
  - name: NODEDNS_PORT
    value: {{ .Values.backend.port | quote }}
  - name: NODEDNS_FALLBACK_PORT
    value: {{ include "nodedns.fallbackPort" . | quote }}
  # The fallback listener on the node's IPs only: the fallback and kube-dns
  # Services' endpoints are the pods' IPs, which are node IPs (hostNetwork),
  # one per family on a dual-stack node (comma-separated).
  - name: NODEDNS_NODE_IPS
    valueFrom:
      fieldRef:
        fieldPath: status.hostIPs
  - name: NODEDNS_FALLBACK_BIND
    value: "$(NODEDNS_NODE_IPS)"
  - name: NODEDNS_CLUSTER_DOMAIN
    value: {{ .Values.clusterDomain | quote }}
  # nodedns_kubernetes: which EndpointSlices to watch.
  - name: NODEDNS_ENDPOINTSLICES
    value: {{ include "nodedns.endpointSlices" . | quote }}
  # Where the watches' last synced state is kept (backend.snapshot).
  - name: NODEDNS_SNAPSHOT_DIR
    value: {{ if .Values.backend.snapshot.enabled }}/var/lib/nodedns-backend{{ else }}none{{ end }}
  # /health and /ready on this pod template's probe address: during a
  # surge the old pod's backend holds the same ports.
  - name: NODEDNS_HEALTH
    value: {{ printf "%s:%v" $probe .Values.backend.healthPort | quote }}
  - name: NODEDNS_READY
    value: {{ printf "%s:%v" $probe .Values.backend.readyPort | quote }}
  - name: NODEDNS_METRICS
    value: {{ printf "$(NODEDNS_NODE_IP):%v" .Values.backend.metricsPort | quote }}
  # Go accepts a plain byte count: the GC works to stay under the limit.
  - name: GOMEMLIMIT
    valueFrom:
      resourceFieldRef:
        containerName: backend
        resource: limits.memory
  # The heap grows to 1.5x the live heap instead of 2x: the backend
  # allocates little once its watches have listed, so the collector's CPU
  # is small, and the steady RSS at 10,000 Services is 12 MiB lower
  # (docs/backend-memory.md).
  - name: GOGC
    value: "50"
  # Two Ps, whatever the node's CPUs: the backend answers only the
  # frontend's misses and the fallback listener, and each P costs memory
  # (its span and page caches, the collector's per-P work): at 10,000
  # Services its working set was 20.2 MiB with 2, 23.2 with 16 and 24.9
  # with 64 (docs/backend-memory.md, "The CPU count"). Without a CPU limit
  # Go would take the node's CPU count.
  - name: GOMAXPROCS
    value: "2"
{{- with .Values.resources.backend }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
# Not root. NET_BIND_SERVICE lets the fallback listener bind the node IP's
# port 53 (backend.fallbackPort auto): the image gives the binary that file
# capability, which a non-root process keeps across exec only when the
# container's bounding and permitted sets hold it.
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
    add: ["NET_BIND_SERVICE"]
  seccompProfile:
    type: RuntimeDefault
{{- if (include "nodedns.nativeSidecar" .) }}
# Ready means the kubernetes plugin has synced; until then the frontend is
# not started. 300 x 1s: a slow API server gets five minutes.
startupProbe:
  httpGet:
    {{- with $probe }}
    host: {{ . }}
    {{- end }}
    path: /ready
    port: {{ .Values.backend.readyPort }}
  periodSeconds: 1
  timeoutSeconds: 1
  failureThreshold: 300
{{- end }}
livenessProbe:
  httpGet:
    {{- with $probe }}
    host: {{ . }}
    {{- end }}
    path: /health
    port: {{ .Values.backend.healthPort }}
  {{- if not (include "nodedns.nativeSidecar" .) }}
  initialDelaySeconds: 60
  {{- end }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 5
readinessProbe:
  httpGet:
    {{- with $probe }}
    host: {{ . }}
    {{- end }}
    path: /ready
    port: {{ .Values.backend.readyPort }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
volumeMounts:
  - name: backend-config
    mountPath: /etc/nodedns
    readOnly: true
  - name: kube-api-access
    mountPath: /var/run/secrets/kubernetes.io/serviceaccount
    readOnly: true
  {{- if .Values.backend.snapshot.enabled }}
  - name: backend-snapshot
    mountPath: /var/lib/nodedns-backend
  {{- end }}
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}


{{/*
backend.endpointSlices, refused at render time unless spec or all: the
backend would refuse it at start-up, on every node at once.
*/}}
{{- define "nodedns.endpointSlices" -}}
{{- $v := .Values.backend.endpointSlices | default "spec" | toString -}}
{{- if not (has $v (list "spec" "all")) -}}
{{- fail (printf "backend.endpointSlices must be \"spec\" or \"all\", not %q" $v) -}}
{{- end -}}
{{- $v -}}
{{- end -}}
